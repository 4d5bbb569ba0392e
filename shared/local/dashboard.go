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

// LimitsPath is where atf dev serves the Lambdas page's limits of each lambda and the starts they
// held today (dashboard.Limits); KeysPath, the Keys page's tasks by key (dashboard.Keys).
const (
	LimitsPath = dashboard.LimitsPath
	KeysPath   = dashboard.KeysPath
)

// dashboardRoutes serves the v1 API under /v1, behind httpapi.Guard with the token, with
// GET ActivityPath, CostsPath, LimitsPath and KeysPath; every other path is the dashboard's
// static files. They hold no data, so they need no token, but are still held to the Guard's
// loopback Host and Origin checks; the page asks for the token when the API answers 401. Paths are matched as they come, without a ServeMux,
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
			case LimitsPath:
				s.limits.ServeHTTP(w, r)
				return
			case KeysPath:
				s.keys.ServeHTTP(w, r)
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
