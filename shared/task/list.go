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

// FailedParams selects a page of the tasks that failed for good (Failed), of every lambda: the
// one view of dead letters across lambdas (RedriveStore.ListFailed).
type FailedParams struct {
	// Statuses, some of Failed, keep those; none means all of Failed.
	Statuses []Status
	Limit    int    // at most MaxListLimit; zero means DefaultListLimit
	Cursor   string // the next value of the previous page
}

// StatusSet is the statuses p asks for: Statuses without repeats, or Failed if none.
func (p FailedParams) StatusSet() []Status {
	var set []Status
	for _, s := range p.Statuses {
		if s != "" && !slices.Contains(set, s) {
			set = append(set, s)
		}
	}
	if set == nil {
		return slices.Clone(Failed)
	}
	return set
}

// PageSize is as ListParams.PageSize.
func (p FailedParams) PageSize() int { return ListParams{Limit: p.Limit}.PageSize() }

// Validate returns ErrInvalid, naming what is wrong, if p asks for a status not in Failed or
// for more than MaxListLimit tasks.
func (p FailedParams) Validate() error {
	for _, s := range p.StatusSet() {
		if !slices.Contains(Failed, s) {
			return Errorf(ErrInvalid, "status %q: only tasks that failed for good, %v, are listed across lambdas; list a lambda's tasks for the others", Echo(string(s)), Failed)
		}
	}
	if p.Limit < 0 || p.Limit > MaxListLimit {
		return Errorf(ErrInvalid, "limit must be in 1..%d, got %d", MaxListLimit, p.Limit)
	}
	return nil
}
