package dashboard

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/openatf/atf/shared/service/metrics"
	"github.com/openatf/atf/shared/task"
)

// LimitsPath is the endpoint of the Lambdas page's "limits" column (Limits), which only atf dev
// serves: on AWS, StartsHeld is on the stack's CloudWatch dashboard.
const LimitsPath = "/v1/dashboard/limits"

// LimitNames are the limits a claim may be held by (task.Held's Limit), in the registry's order.
var LimitNames = [...]string{"max_running", "key_concurrency", "rate", "key_rate"}

// Limits serves the limits of the lambdas atf dev runs (task.Limits) with, per lambda and limit,
// the claims each held back today (the UTC day). It is a metrics.Recorder that takes the holds
// only; its memory is fixed: a counter per lambda it was made with and per LimitNames.
type Limits struct {
	metrics.Nop
	mu      sync.Mutex
	now     func() time.Time
	day     string // the UTC day counted, 2006-01-02
	lambdas map[string]*lambdaLimits
}

type lambdaLimits struct {
	limits task.LimitsSpec
	held   [len(LimitNames)]int // by LimitNames
}

var _ metrics.Recorder = (*Limits)(nil)

// NewLimits returns the Limits of the lambdas; now is time.Now if nil.
func NewLimits(lambdas []task.Lambda, now func() time.Time) *Limits {
	if now == nil {
		now = time.Now
	}
	l := &Limits{now: now, lambdas: map[string]*lambdaLimits{}}
	for _, lambda := range lambdas {
		l.lambdas[lambda.Name] = &lambdaLimits{limits: lambda.Limits.Spec()}
	}
	return l
}

// today returns the UTC day of now, and clears the counts of a day before it. The caller holds
// l.mu.
func (l *Limits) today() string {
	day := l.now().UTC().Format(time.DateOnly)
	if day != l.day {
		l.day = day
		for _, lambda := range l.lambdas {
			lambda.held = [len(LimitNames)]int{}
		}
	}
	return day
}

// Held counts a claim of lambda's that the limit held back (metrics.Recorder). A lambda or a limit
// it does not know is not counted.
func (l *Limits) Held(lambda, limit string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.today()
	i := slices.Index(LimitNames[:], limit)
	if lambda := l.lambdas[lambda]; lambda != nil && i >= 0 {
		lambda.held[i]++
	}
}

// LambdaLimitsJSON is one lambda in the answer of GET LimitsPath.
type LambdaLimitsJSON struct {
	Lambda string          `json:"lambda"`
	Limits task.LimitsSpec `json:"limits"` // as the registry writes them; empty: none
	// Held counts the claims held back today, by limit (LimitNames); a limit that held none is
	// left out.
	Held map[string]int `json:"held"`
}

// LimitsJSON is the answer of GET LimitsPath.
type LimitsJSON struct {
	Day     string             `json:"day"`     // UTC
	Lambdas []LambdaLimitsJSON `json:"lambdas"` // by name
}

// Snapshot returns every lambda's limits and today's holds.
func (l *Limits) Snapshot() LimitsJSON {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := LimitsJSON{Day: l.today(), Lambdas: make([]LambdaLimitsJSON, 0, len(l.lambdas))}
	for name, lambda := range l.lambdas {
		held := map[string]int{}
		for i, n := range lambda.held {
			if n > 0 {
				held[LimitNames[i]] = n
			}
		}
		out.Lambdas = append(out.Lambdas, LambdaLimitsJSON{Lambda: name, Limits: lambda.limits, Held: held})
	}
	slices.SortFunc(out.Lambdas, func(a, b LambdaLimitsJSON) int { return strings.Compare(a.Lambda, b.Lambda) })
	return out
}

// ServeHTTP answers GET LimitsPath: LimitsJSON, bounded by the lambdas it was made with.
func (l *Limits) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(l.Snapshot())
}
