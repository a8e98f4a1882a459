package frwr

import "context"

// waitQueue is a FIFO of goroutines waiting for an item of a pool. Items
// are handed to the first waiter directly, so a pool's free list is never
// non-empty while someone waits. All methods need the registry's mutex.
type waitQueue[T any] struct {
	waiters []chan T
}

// addLocked queues a new waiter and returns its channel.
func (q *waitQueue[T]) addLocked() chan T {
	ch := make(chan T, 1)
	q.waiters = append(q.waiters, ch)
	return ch
}

// waitingLocked reports whether anybody waits.
func (q *waitQueue[T]) waitingLocked() bool { return len(q.waiters) > 0 }

// handLocked gives x to the first waiter; false if nobody waits.
func (q *waitQueue[T]) handLocked(x T) bool {
	if len(q.waiters) == 0 {
		return false
	}
	ch := q.waiters[0]
	n := copy(q.waiters, q.waiters[1:])
	q.waiters[n] = nil
	q.waiters = q.waiters[:n]
	ch <- x // buffered: never blocks
	return true
}

// removeLocked removes a waiter that gave up; false if it was already
// handed an item (or the queue was closed).
func (q *waitQueue[T]) removeLocked(ch chan T) bool {
	for i, c := range q.waiters {
		if c == ch {
			n := copy(q.waiters[i:], q.waiters[i+1:])
			q.waiters[i+n] = nil
			q.waiters = q.waiters[:i+n]
			return true
		}
	}
	return false
}

// closeAllLocked wakes every waiter with a closed channel.
func (q *waitQueue[T]) closeAllLocked() {
	for _, ch := range q.waiters {
		close(ch)
	}
	clear(q.waiters)
	q.waiters = nil
}

// wait blocks on ch until an item arrives (ok), the queue is closed
// (!ok), or ctx ends. It is called without the mutex; lock and unlock are
// the registry's. When ctx ends it withdraws the waiter or, if an item
// arrived at the same moment, passes it on with giveBack (mutex held).
func wait[T any](ctx context.Context, q *waitQueue[T], ch chan T, lock, unlock func(), giveBack func(T)) (T, bool, error) {
	select {
	case x, ok := <-ch:
		return x, ok, nil
	case <-ctx.Done():
		lock()
		defer unlock()
		var zero T
		if q.removeLocked(ch) {
			return zero, false, ctx.Err()
		}
		if x, ok := <-ch; ok {
			giveBack(x)
		}
		return zero, false, ctx.Err()
	}
}
