package xprt

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma/verbs"
	"github.com/nfsrdma/nfsrdma/verbs/faulty"
	"github.com/nfsrdma/nfsrdma/xprt/xprttest"
)

// postRecorder watches the client's posts (verbs/faulty's OnPost): the
// order in which work requests reach the device, and, once armed, holds
// the next post until released, as a slow ibv_post_send on rxe would.
type postRecorder struct {
	mu    sync.Mutex
	ids   []uint64
	armed atomic.Bool
	held  chan struct{}
	hold  chan struct{}
	once  sync.Once
}

// newPostRecorder watches f's posts. A test that fails while a post is
// held releases it on its way out, so that the stack's teardown ends.
func newPostRecorder(t *testing.T, f *faulty.Fabric) *postRecorder {
	r := &postRecorder{held: make(chan struct{}, 1), hold: make(chan struct{})}
	t.Cleanup(r.release)
	f.OnPost(func(wrs []verbs.SendWR) {
		if r.armed.CompareAndSwap(true, false) {
			r.held <- struct{}{}
			<-r.hold
		}
		// Recorded after the hold: the order is the device's.
		r.mu.Lock()
		for _, w := range wrs {
			r.ids = append(r.ids, w.ID)
		}
		r.mu.Unlock()
	})
	return r
}

func (r *postRecorder) release() { r.once.Do(func() { close(r.hold) }) }

func (r *postRecorder) since(n int) []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint64(nil), r.ids[n:]...)
}

func (r *postRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}

// inWridOrder fails unless the send-queue wrids (the drain's sentinel
// aside) reached the device in increasing order, the order the ring
// retires them in.
func inWridOrder(t *testing.T, ids []uint64) {
	t.Helper()
	var last uint64
	seen := false
	for i, id := range ids {
		if id == sentinelID {
			continue
		}
		if seen && id <= last {
			t.Fatalf("wrid %d reached the device after %d (post %d of %v): chains out of ring order", id, last, i, ids)
		}
		last, seen = id, true
	}
}

func wrapFaulty(ff **faulty.Fabric) func(verbs.Fabric) verbs.Fabric {
	return func(f verbs.Fabric) verbs.Fabric {
		*ff = faulty.New(f)
		return *ff
	}
}

// Combined posting: while one caller is in ibv_post_send (conn.mu
// released), the others' chains are appended behind and go out with its
// next post, in wrid order.
func TestCombinedPostingKeepsWridOrder(t *testing.T) {
	var ff *faulty.Fabric
	s := newStack(t, stackOpts{wrap: wrapFaulty(&ff)})
	rec := newPostRecorder(t, ff)
	fh, data := s.file("f", 64<<10)
	ctx := s.ctx(20 * time.Second)
	// Credits grow with the server's grants: enough for the calls below.
	for range 3 {
		if errs := parallel(8, func(int) error { return s.c.Null(ctx) }); len(errs) > 0 {
			t.Fatal(errs[0])
		}
	}
	start := rec.count()
	before := s.tr.Counters()
	rec.armed.Store(true)
	const n = 6
	done := make(chan []error, 1)
	bufs := make([][]byte, n)
	go func() {
		done <- parallel(n, func(i int) error {
			bufs[i] = make([]byte, 8<<10)
			_, err := s.c.Read(ctx, fh, uint64(i)*8<<10, bufs[i])
			return err
		})
	}()
	<-rec.held
	// One caller is posting with conn.mu released: the other calls must
	// not wait for it, but hand their chains over and wait for replies.
	waitFor(t, "the other calls' chains handed to the poster", func() bool {
		return s.tr.Counters().PostsCombined-before.PostsCombined >= n-1
	})
	rec.release()
	if errs := <-done; len(errs) > 0 {
		t.Fatal(errs[0])
	}
	for i := range n {
		if !bytes.Equal(bufs[i], data[i*8<<10:(i+1)*8<<10]) {
			t.Fatalf("READ %d returned wrong data", i)
		}
	}
	inWridOrder(t, rec.since(start))
	after := s.tr.Counters()
	// The held chain's post, then one post for the n-1 behind it (and
	// any LOCAL_INVs of the replies: the server invalidates one rkey).
	if posts := after.Posts - before.Posts; posts > 2+n {
		t.Fatalf("%d posts for %d calls combined behind one", posts, n-1)
	}
}

// A LOCAL_INV chain of a reply settled while a caller posts goes out
// behind the chains reserved before it, never ahead of them.
func TestCombinedPostingLocalInvalidationsInOrder(t *testing.T) {
	var ff *faulty.Fabric
	s := newStack(t, stackOpts{wrap: wrapFaulty(&ff), client: Config{MaxSegment: 16 << 10}, server: xprttest.Config{
		Misbehave: xprttest.Misbehavior{Select: func(ci xprttest.CallInfo) bool { return ci.Proc == 6 }, Delay: 300 * time.Millisecond}}})
	rec := newPostRecorder(t, ff)
	fh, data := s.file("f", 64<<10)
	ctx := s.ctx(20 * time.Second)
	for range 2 {
		if errs := parallel(4, func(int) error { return s.c.Null(ctx) }); len(errs) > 0 {
			t.Fatal(errs[0])
		}
	}
	start := rec.count()
	before := s.tr.Counters()
	// A READ in four segments: its reply needs three LOCAL_INVs.
	readDone := make(chan error, 1)
	buf := make([]byte, len(data))
	go func() {
		_, err := s.c.Read(ctx, fh, 0, buf)
		readDone <- err
	}()
	waitFor(t, "the READ at the server", func() bool { return s.tr.Counters().Sends-before.Sends >= 1 })
	rec.armed.Store(true)
	nullDone := make(chan error, 1)
	go func() { nullDone <- s.c.Null(ctx) }()
	<-rec.held
	// The READ's reply comes while the NULL's post is held: its
	// LOCAL_INVs wait behind the NULL's chain.
	waitFor(t, "the LOCAL_INVs handed to the poster", func() bool {
		return s.tr.Counters().PostsCombined-before.PostsCombined >= 1
	})
	rec.release()
	if err := <-nullDone; err != nil {
		t.Fatal(err)
	}
	if err := <-readDone; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, data) {
		t.Fatal("READ returned wrong data")
	}
	if s.tr.Counters().LocalInvalidations == 0 {
		t.Fatal("no local invalidation")
	}
	inWridOrder(t, rec.since(start))
}

// Rule 5 with combined posting: the drain's send sentinel goes after
// every chain, so it waits for a caller that posts with conn.mu released.
func TestDrainWaitsForPoster(t *testing.T) {
	var ff *faulty.Fabric
	s := newStack(t, stackOpts{wrap: wrapFaulty(&ff)})
	rec := newPostRecorder(t, ff)
	ctx := s.ctx(20 * time.Second)
	if err := s.c.Null(ctx); err != nil {
		t.Fatal(err)
	}
	qp := s.clientQP()
	start := rec.count()
	rec.armed.Store(true)
	nullDone := make(chan error, 1)
	go func() { nullDone <- s.c.Null(ctx) }()
	<-rec.held
	closed := make(chan error, 1)
	go func() { closed <- s.tr.Close() }()
	waitFor(t, "the connection torn down", func() bool { return s.tr.Counters().Disconnects >= 1 })
	time.Sleep(50 * time.Millisecond) // a drain that did not wait would post its sentinel now
	rec.release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	<-nullDone
	ids := rec.since(start)
	if len(ids) == 0 || ids[len(ids)-1] != sentinelID {
		t.Fatalf("posts after the hold: %v; want the drain's sentinel last", ids)
	}
	if qp.ClosedUndrained() {
		t.Fatal("the client's QP was closed undrained")
	}
}
