package frwr

import "github.com/nfsrdma/nfsrdma/verbs"

// ReadyMRs returns the MRs of the registrations made ahead and not taken,
// for tests that play a peer guessing their keys.
func ReadyMRs(r *Registry) []verbs.MR {
	r.mu.Lock()
	defer r.mu.Unlock()
	var mrs []verbs.MR
	for _, s := range r.stocks {
		for _, g := range s.ready {
			mrs = append(mrs, g.mr)
		}
	}
	return mrs
}
