package httpapi

import "net/http"

// Patterns returns the route patterns of an API handler that New returned.
func Patterns(h http.Handler) []string { return h.(*api).mux.patterns }
