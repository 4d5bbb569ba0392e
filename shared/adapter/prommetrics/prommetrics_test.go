package prommetrics_test

import (
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/openatf/atf/shared/adapter/prommetrics"
	"github.com/openatf/atf/shared/service/metrics"
	"github.com/openatf/atf/shared/task"
)

// TestErrorCountersStartAtZero: before any error, the sweep errors of each lambda and the store
// errors of each op and kind are there, at zero, so that an alert on them tells "none" from
// "missing".
func TestErrorCountersStartAtZero(t *testing.T) {
	m := prommetrics.New(prommetrics.Config{Lambdas: []task.Lambda{{Name: "echo"}, {Name: "mail"}}})
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]map[string]float64{} // family → labels → value
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			if series[f.GetName()] == nil {
				series[f.GetName()] = map[string]float64{}
			}
			series[f.GetName()][labels(mt)] = mt.GetCounter().GetValue()
		}
	}
	want := map[string]map[string]float64{
		"atf_sweep_errors_total": {"lambda=echo": 0, "lambda=mail": 0},
		"atf_store_errors_total": {},
	}
	for _, op := range metrics.StoreOps {
		for _, kind := range metrics.Kinds {
			want["atf_store_errors_total"]["kind="+string(kind)+",op="+op] = 0
		}
	}
	for name, w := range want {
		got := series[name]
		if len(got) != len(w) {
			t.Errorf("%s: %d series, want %d: %v", name, len(got), len(w), got)
		}
		for l, v := range w {
			if g, ok := got[l]; !ok || g != v {
				t.Errorf("%s{%s}: %v (there: %v), want %v", name, l, g, ok, v)
			}
		}
	}
}

func labels(m *dto.Metric) string {
	s := ""
	for i, l := range m.GetLabel() { // sorted by name
		if i > 0 {
			s += ","
		}
		s += l.GetName() + "=" + l.GetValue()
	}
	return s
}
