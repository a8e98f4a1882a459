package faults

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// Fault is one kind of fault the driver can inject.
type Fault struct {
	Name string
	// Inject injects the fault and returns once it is over (the server
	// back, the mount remounted): the workloads should then recover.
	Inject func(ctx context.Context) error
}

// Event is one injection by the driver.
type Event struct {
	Fault      string
	Start, End time.Time // Inject's call and return
	Err        error     // Inject's error (the fault could not be injected)
}

// Driver injects faults at random intervals.
type Driver struct {
	Faults   []Fault
	Min, Max time.Duration // the pause before each injection is uniform in [Min, Max]
	Rand     *rand.Rand
	// OnStart, when set, is called before each injection; OnEvent after.
	OnStart func(fault string)
	OnEvent func(Event)

	mu     sync.Mutex
	events []Event
}

// Run injects faults until ctx is done: each pass over the faults goes
// through all of them in a random order, so that a short run still sees
// each kind once its passes add up.
func (d *Driver) Run(ctx context.Context) {
	r := d.Rand
	if r == nil {
		r = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	}
	var order []int
	for {
		pause := d.Min
		if d.Max > d.Min {
			pause += time.Duration(r.Int64N(int64(d.Max - d.Min)))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		if len(order) == 0 {
			order = r.Perm(len(d.Faults))
		}
		f := d.Faults[order[0]]
		order = order[1:]
		if d.OnStart != nil {
			d.OnStart(f.Name)
		}
		ev := Event{Fault: f.Name, Start: time.Now()}
		ev.Err = f.Inject(context.WithoutCancel(ctx))
		ev.End = time.Now()
		d.mu.Lock()
		d.events = append(d.events, ev)
		d.mu.Unlock()
		if d.OnEvent != nil {
			d.OnEvent(ev)
		}
	}
}

// Events returns the injections made so far.
func (d *Driver) Events() []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Event(nil), d.events...)
}
