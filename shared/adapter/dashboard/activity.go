package dashboard

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/task"
)

// Minutes is how far back Activity remembers: the charts' last hour, a minute a slot.
const Minutes = 60

// LatencyBoundsMS are the upper bounds of the delivery-latency buckets, in milliseconds; a last
// bucket takes what is over the last bound.
var LatencyBoundsMS = [...]int64{10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000}

// Activity counts, per lambda and minute over the last hour, the deliveries of tasks (claims),
// the delivery latency of first attempts, and how runs ended. It is what this process saw:
// atf dev's own claims and results, from its start; nothing is read from the store. Its memory is
// fixed: Minutes slots of fixed counters per lambda it was made with; other lambdas are ignored.
type Activity struct {
	mu      sync.Mutex
	now     func() time.Time
	lambdas map[string]*[Minutes]minute
}

// minute is one slot of the ring: the counts of the minute that starts at unix minute start.
type minute struct {
	start     int64
	delivered int
	first     int                           // deliveries of a first attempt, the latency samples
	latency   [len(LatencyBoundsMS) + 1]int // first attempts, by LatencyBoundsMS
	maxMS     int64                         // the largest latency sample
	ended     [len(endedStatuses)]int       // runs ended, by endedStatuses
}

// endedStatuses are the statuses a run ends in, as Ended counts them.
var endedStatuses = [...]task.Status{task.StatusSuccess, task.StatusRetriableFailure, task.StatusFatalFailure, task.StatusDead, task.StatusCancelled}

// NewActivity returns an Activity of the lambdas named; now is time.Now if nil.
func NewActivity(lambdas []string, now func() time.Time) *Activity {
	if now == nil {
		now = time.Now
	}
	a := &Activity{now: now, lambdas: map[string]*[Minutes]minute{}}
	for _, l := range lambdas {
		a.lambdas[l] = new([Minutes]minute)
	}
	return a
}

// slot returns the lambda's slot of the current minute, cleared if it held an older one; nil for
// a lambda it does not know. The caller holds a.mu.
func (a *Activity) slot(lambda string) *minute {
	ring := a.lambdas[lambda]
	if ring == nil {
		return nil
	}
	now := a.now().Unix() / 60
	m := &ring[now%Minutes]
	if m.start != now {
		*m = minute{start: now}
	}
	return m
}

// Claimed records a delivery: the task as its claim returned it, at the time of the claim. A first
// attempt (Attempts 1, as after a redrive too) is a latency sample: how long after its run_at it
// was claimed. A retry's due time is not kept on the task, so retries count as deliveries only.
func (a *Activity) Claimed(t task.Task) {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.slot(t.Lambda)
	if m == nil {
		return
	}
	m.delivered++
	if t.Attempts != 1 {
		return
	}
	ms := max(a.now().Sub(t.RunAt).Milliseconds(), 0)
	i, _ := slices.BinarySearch(LatencyBoundsMS[:], ms)
	m.first++
	m.latency[i]++
	m.maxMS = max(m.maxMS, ms)
}

// Ended records the end of a run, by the status the task took: success, retriable_failure (it
// will run again), fatal_failure, dead or cancelled. Other statuses are not counted. A retry sent
// ahead ends its run enqueued, in its queue for the retry: it counts as retriable_failure, as the
// lifecycle event of the write (and so /metrics) tells it.
func (a *Activity) Ended(t task.Task) {
	status := t.Status
	if e, ok := lifecycle.Written(t); ok {
		status = e.Status
	}
	i := slices.Index(endedStatuses[:], status)
	if i < 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if m := a.slot(t.Lambda); m != nil {
		m.ended[i]++
	}
}

// MinuteJSON is one minute of the answer of GET /v1/dashboard/activity.
type MinuteJSON struct {
	Start     time.Time `json:"start"`
	Delivered int       `json:"delivered"`
	// FirstAttempts are the deliveries of first attempts, whose latencies the percentiles take.
	FirstAttempts int `json:"first_attempts"`
	// P50MS and P95MS bound the percentiles from above: the upper bound of the bucket the
	// percentile falls in, or the minute's largest sample if that is less. Nil without samples.
	P50MS *int64              `json:"p50_ms"`
	P95MS *int64              `json:"p95_ms"`
	MaxMS *int64              `json:"max_ms"`
	Ended map[task.Status]int `json:"ended"`
}

// ActivityJSON is the answer of GET /v1/dashboard/activity.
type ActivityJSON struct {
	Lambda  string       `json:"lambda,omitempty"`
	Minutes []MinuteJSON `json:"minutes"` // the last Minutes minutes, oldest first, the current one last
}

// Snapshot sums the last hour of the lambda, or of every lambda if lambda is "". ok is false for a
// lambda it does not know.
func (a *Activity) Snapshot(lambda string) (out ActivityJSON, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	rings := make([]*[Minutes]minute, 0, len(a.lambdas))
	if lambda != "" {
		ring := a.lambdas[lambda]
		if ring == nil {
			return out, false
		}
		rings = append(rings, ring)
	} else {
		for _, ring := range a.lambdas {
			rings = append(rings, ring)
		}
	}
	now := a.now().Unix() / 60
	out = ActivityJSON{Lambda: lambda, Minutes: make([]MinuteJSON, 0, Minutes)}
	for start := now - Minutes + 1; start <= now; start++ {
		var sum minute
		for _, ring := range rings {
			m := ring[start%Minutes]
			if m.start != start {
				continue
			}
			sum.delivered += m.delivered
			sum.first += m.first
			for i, n := range m.latency {
				sum.latency[i] += n
			}
			sum.maxMS = max(sum.maxMS, m.maxMS)
			for i, n := range m.ended {
				sum.ended[i] += n
			}
		}
		mj := MinuteJSON{Start: time.Unix(start*60, 0).UTC(), Delivered: sum.delivered, FirstAttempts: sum.first, Ended: map[task.Status]int{}}
		if sum.first > 0 {
			mj.P50MS, mj.P95MS, mj.MaxMS = sum.percentile(0.50), sum.percentile(0.95), &sum.maxMS
		}
		for i, n := range sum.ended {
			mj.Ended[endedStatuses[i]] = n
		}
		out.Minutes = append(out.Minutes, mj)
	}
	return out, true
}

// percentile returns the upper bound of the bucket of the q-quantile's sample (nearest rank), at
// most maxMS.
func (m minute) percentile(q float64) *int64 {
	rank := int(math.Ceil(q * float64(m.first))) // the nearest rank, 1-based
	seen := 0
	for i, n := range m.latency {
		seen += n
		if seen >= rank {
			bound := m.maxMS
			if i < len(LatencyBoundsMS) {
				bound = min(LatencyBoundsMS[i], m.maxMS)
			}
			return &bound
		}
	}
	return &m.maxMS
}

// ServeHTTP answers GET /v1/dashboard/activity[?lambda=NAME]: ActivityJSON, 404 for a lambda it
// does not know. Its answer is bounded: Minutes minutes of fixed counters.
func (a *Activity) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	lambda := r.URL.Query().Get("lambda")
	out, ok := a.Snapshot(lambda)
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": "not_found", "message": "no lambda " + task.Echo(lambda)}})
		return
	}
	_ = json.NewEncoder(w).Encode(out)
}
