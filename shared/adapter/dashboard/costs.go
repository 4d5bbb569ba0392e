package dashboard

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/service/metrics"
	"github.com/openatf/atf/shared/task"
)

// CostsPath is the endpoint of the Lambdas page's "on AWS, today" column (Costs), which only
// atf dev serves: a deployed stack shows its dollars per lambda on its CloudWatch dashboard.
const CostsPath = "/v1/dashboard/costs"

// Costs counts, per lambda, the transitions this atf dev wrote today (the UTC day) and prices
// them as the DynamoDB store of a deployed stack would be billed: cost.TransitionUnits at cost's
// list prices, the model and prices `make bench` measures with. It is a metrics.Recorder that
// takes the transitions only; its memory is fixed: a counter per lambda it was made with.
type Costs struct {
	metrics.Nop
	mu      sync.Mutex
	now     func() time.Time
	day     string // the UTC day counted, 2006-01-02
	lambdas map[string]*lambdaCost
}

type lambdaCost struct {
	transitions int
	units       cost.Units
}

var _ metrics.Recorder = (*Costs)(nil)

// NewCosts returns the Costs of the lambdas named; now is time.Now if nil.
func NewCosts(lambdas []string, now func() time.Time) *Costs {
	if now == nil {
		now = time.Now
	}
	c := &Costs{now: now, lambdas: map[string]*lambdaCost{}}
	for _, l := range lambdas {
		c.lambdas[l] = &lambdaCost{}
	}
	return c
}

// today returns the UTC day of now, and clears the counts of a day before it. The caller holds
// c.mu.
func (c *Costs) today() string {
	day := c.now().UTC().Format(time.DateOnly)
	if day != c.day {
		c.day = day
		for _, l := range c.lambdas {
			*l = lambdaCost{}
		}
	}
	return day
}

// Transitions counts n tasks of lambda moved from status from to status to (metrics.Recorder).
func (c *Costs) Transitions(lambda string, from, to task.Status, _ lifecycle.Type, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.today()
	if l := c.lambdas[lambda]; l != nil && n > 0 {
		l.transitions += n
		l.units = l.units.Plus(cost.TransitionUnits(from, to).Times(float64(n)))
	}
}

// LambdaCostJSON is one lambda's day in the answer of GET CostsPath.
type LambdaCostJSON struct {
	Lambda      string  `json:"lambda"`
	Transitions int     `json:"transitions"`
	WriteUnits  float64 `json:"write_units"`
	ReadUnits   float64 `json:"read_units"`
	USD         float64 `json:"usd"` // the units at DynamoDB's on-demand list prices
}

// CostsJSON is the answer of GET CostsPath.
type CostsJSON struct {
	Day           string           `json:"day"` // UTC
	PricesChecked string           `json:"prices_checked"`
	Lambdas       []LambdaCostJSON `json:"lambdas"` // by name
}

// Snapshot returns today's counts of every lambda.
func (c *Costs) Snapshot() CostsJSON {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := CostsJSON{Day: c.today(), PricesChecked: cost.PricesChecked, Lambdas: make([]LambdaCostJSON, 0, len(c.lambdas))}
	for name, l := range c.lambdas {
		out.Lambdas = append(out.Lambdas, LambdaCostJSON{Lambda: name, Transitions: l.transitions,
			WriteUnits: l.units.Write, ReadUnits: l.units.Read, USD: l.units.USD()})
	}
	slices.SortFunc(out.Lambdas, func(a, b LambdaCostJSON) int { return strings.Compare(a.Lambda, b.Lambda) })
	return out
}

// ServeHTTP answers GET CostsPath: CostsJSON, bounded by the lambdas it was made with.
func (c *Costs) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(c.Snapshot())
}
