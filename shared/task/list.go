package task

import "slices"

// StatusSet is the statuses p filters on: Status and Statuses, without repeats; nil for none.
func (p ListParams) StatusSet() []Status {
	var set []Status
	for _, s := range append([]Status{p.Status}, p.Statuses...) {
		if s != "" && !slices.Contains(set, s) {
			set = append(set, s)
		}
	}
	return set
}

// Matches reports whether t passes p's filters (the lambda aside).
func (p ListParams) Matches(t Task) bool {
	if set := p.StatusSet(); set != nil && !slices.Contains(set, t.Status) {
		return false
	}
	if p.Collection != "" && t.Collection != p.Collection {
		return false
	}
	if !p.CreatedFrom.IsZero() && t.CreatedAt.Before(p.CreatedFrom) {
		return false
	}
	return p.CreatedTo.IsZero() || t.CreatedAt.Before(p.CreatedTo)
}
