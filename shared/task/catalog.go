package task

import (
	"cmp"
	"context"
	"slices"
)

// Catalog is where the services that serve every lambda (the frontend, the consumer) learn the
// lambdas. Its set may change while they run: on AWS each lambda stack writes its own lambdas
// (package ssmcatalog), so a lambda appears or goes when its stack is deployed or deleted. A
// lambda the catalog does not list is unknown, whatever tasks of it the store keeps.
type Catalog interface {
	// Lambda returns the lambda called name, and whether the catalog lists it. The error is
	// ErrUnavailable when the catalog cannot say.
	Lambda(ctx context.Context, name string) (Lambda, bool, error)
	// Lambdas returns every lambda, by name; ErrUnavailable when the catalog cannot say.
	Lambdas(ctx context.Context) ([]Lambda, error)
}

// FixedCatalog is a Catalog of a set that never changes, with defaults applied: the lambdas of
// lambdas.json under atf dev, of ATF_LAMBDAS, or of a test. It is meant for a few lambdas: a
// lookup reads them all.
type FixedCatalog []Lambda

// Lambda implements Catalog.
func (c FixedCatalog) Lambda(_ context.Context, name string) (Lambda, bool, error) {
	i := slices.IndexFunc(c, func(l Lambda) bool { return l.Name == name })
	if i < 0 {
		return Lambda{}, false, nil
	}
	return c[i], true, nil
}

// Lambdas implements Catalog.
func (c FixedCatalog) Lambdas(context.Context) ([]Lambda, error) {
	return slices.SortedFunc(slices.Values(c), func(a, b Lambda) int { return cmp.Compare(a.Name, b.Name) }), nil
}

var _ Catalog = FixedCatalog(nil)
