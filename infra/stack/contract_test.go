package stack

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/adapter/httpapi"
)

// TestRoutesAreTheContract: the API Gateway routes are the operations of the API's OpenAPI
// contract, no more, no fewer: a route missing here answers 404 on AWS alone.
func TestRoutesAreTheContract(t *testing.T) {
	var contract struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(httpapi.OpenAPI(), &contract); err != nil {
		t.Fatal(err)
	}
	var documented, routed []string
	for path, item := range contract.Paths {
		for method := range item {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options":
				documented = append(documented, strings.ToUpper(method)+" "+path)
			}
		}
	}
	for _, r := range apiRoutes {
		routed = append(routed, r.method+" "+r.path)
	}
	for _, d := range documented {
		if !slices.Contains(routed, d) {
			t.Errorf("the contract's %s has no API Gateway route", d)
		}
	}
	for _, r := range routed {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in the contract", r)
		}
	}
}
