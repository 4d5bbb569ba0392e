package httpapi

import (
	_ "embed"
	"net/http"
	"slices"
)

// contract is the OpenAPI 3.1 contract of v1, served at GET /v1/openapi.json. It is the API's
// documentation for machines: every route with its parameters, bodies, answers and errors. The
// tests validate every answer they get against it, and make test runs schemathesis with it
// against atf dev.
//
//go:embed openapi.json
var contract []byte

// OpenAPI returns the OpenAPI 3.1 contract of v1, as JSON.
func OpenAPI() []byte { return slices.Clone(contract) }

func (a *api) openAPI(w http.ResponseWriter, _ *http.Request) {
	write(w, http.StatusOK, contract)
}

// routes is the API's ServeMux that remembers the patterns it was given, so that a test can
// hold them against the contract's.
type routes struct {
	*http.ServeMux
	patterns []string
}

func (m *routes) HandleFunc(pattern string, handler func(http.ResponseWriter, *http.Request)) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.HandleFunc(pattern, handler)
}
