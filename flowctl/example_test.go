package flowctl_test

import (
	"fmt"
	"sync"

	"github.com/nfsrdma/nfsrdma/flowctl"
)

// sendQueue shows how a transport wraps the pure types: one mutex guards
// them, and each waiting RPC has a channel that the admit callback closes.
type sendQueue struct {
	mu      sync.Mutex
	gate    *flowctl.CongestionGate[int]
	ring    *flowctl.SendContextRing[string]
	waiters map[int]chan struct{}
}

// start blocks until RPC id may post its compound of n WRs.
func (q *sendQueue) start(id, n int) {
	q.mu.Lock()
	if q.gate.Admit(id, n) {
		q.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	q.waiters[id] = ch
	q.mu.Unlock()
	<-ch // a real transport also selects on ctx.Done() and calls Cancel
}

// post reserves the chain in the ring, as ibv_post_send would be called.
func (q *sendQueue) post(n int, what string) flowctl.Reservation {
	q.mu.Lock()
	defer q.mu.Unlock()
	res, ok := q.ring.Reserve(n, false)
	if !ok {
		panic("the gate admitted a compound the ring cannot hold")
	}
	for w := res.First; w <= res.Last(); w++ {
		*q.ring.Slot(w) = what
	}
	return res
}

// completion handles one send completion.
func (q *sendQueue) completion(wrid uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, err := q.ring.Complete(wrid, func(w uint64, what *string) {
		// Release the send buffer of *what here.
	})
	if err != nil {
		panic(err)
	}
	q.gate.Free(n, func(id, _ int) {
		close(q.waiters[id])
		delete(q.waiters, id)
	})
}

func Example() {
	q := &sendQueue{
		gate:    flowctl.NewCongestionGate[int](4),
		ring:    flowctl.NewSendContextRing[string](4, 4),
		waiters: map[int]chan struct{}{},
	}
	q.start(1, 4) // BIND, BIND, SEND, and room for one LOCAL_INV
	res := q.post(3, "rpc 1")
	fmt.Println("rpc 1 posted, signal last WR:", res.Signal)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		q.start(2, 2) // waits: the queue is full
		fmt.Println("rpc 2 admitted")
	}()
	for {
		q.mu.Lock()
		waiting := q.gate.Waiting()
		q.mu.Unlock()
		if waiting == 1 {
			break
		}
	}
	q.completion(res.Last()) // frees the 3 posted WRs
	wg.Wait()
	q.mu.Lock()
	fmt.Println("congestion waits:", q.gate.Waits())
	q.mu.Unlock()
	// Output:
	// rpc 1 posted, signal last WR: true
	// rpc 2 admitted
	// congestion waits: 1
}
