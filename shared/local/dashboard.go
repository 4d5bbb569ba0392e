package local

import (
	"net"
	"net/http"
	"strings"

	"github.com/openatf/atf/shared/adapter/dashboard"
	"github.com/openatf/atf/shared/adapter/httpapi"
)

// ActivityPath is where atf dev serves the dashboard's last hour of claims and results
// (dashboard.Activity), beside the v1 API and behind the same guard.
const ActivityPath = "/v1/dashboard/activity"

// CostsPath is where atf dev serves the Lambdas page's cost on AWS of each lambda's transitions
// today (dashboard.Costs), beside ActivityPath.
const CostsPath = dashboard.CostsPath

// dashboardRoutes serves the v1 API under /v1, behind httpapi.Guard with the token, with
// GET ActivityPath and CostsPath; every other path is the dashboard's static files. They hold no
// data, so they need no token, but are still held to the Guard's loopback Host and Origin checks;
// the page asks for the token when the API answers 401. Paths are matched as they come, without a ServeMux,
// which would redirect the unclean paths that the API answers itself.
func (s *Stack) dashboardRoutes(api http.Handler, addr net.Addr, token string) http.Handler {
	v1 := httpapi.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			switch r.URL.Path {
			case ActivityPath:
				s.activity.ServeHTTP(w, r)
				return
			case CostsPath:
				s.costs.ServeHTTP(w, r)
				return
			}
		}
		api.ServeHTTP(w, r)
	}), addr, token)
	static := httpapi.Guard(dashboard.Static(), addr, "")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1" || strings.HasPrefix(r.URL.Path, "/v1/") || r.URL.Path == "/metrics" {
			v1.ServeHTTP(w, r)
			return
		}
		static.ServeHTTP(w, r)
	})
}
