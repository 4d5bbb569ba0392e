package stack

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/registry"
)

// TestDollarsPerLambda: each lambda stack's dashboard shows the dollars of each lambda's day: the
// write and read units and invocations its functions write (package emf), and its worker's
// invocations and its worker's and status function's time (AWS/Lambda), summed over a day, at the
// list prices of package cost.
func TestDollarsPerLambda(t *testing.T) {
	st := synthSmall(t, "prod", mustEnvs(t)["prod"])
	reg, err := registry.Parse([]byte(smallRegistry))
	if err != nil {
		t.Fatal(err)
	}
	entry, _ := reg.Lambda("a")
	workerMB := entry.Function.MemoryMB
	if len(st.Lambdas) != 1 {
		t.Fatalf("%d lambda stacks, want 1", len(st.Lambdas))
	}
	for _, s := range st.Lambdas {
		tpl := assertions.Template_FromStack(s, nil)
		boards := *tpl.FindResources(jsii.String("AWS::CloudWatch::Dashboard"), nil)
		if len(boards) != 1 {
			t.Fatalf("%s: %d dashboards, want 1", *s.StackName(), len(boards))
		}
		for _, b := range boards {
			body := joined(props(*b)["DashboardBody"])
			var dash struct {
				Widgets []struct {
					Properties struct {
						Title   string  `json:"title"`
						Metrics [][]any `json:"metrics"`
					} `json:"properties"`
				} `json:"widgets"`
			}
			if err := json.Unmarshal([]byte(body), &dash); err != nil {
				t.Fatalf("the dashboard's body: %v\n%s", err, body)
			}
			price := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
			want := fmt.Sprintf("(FILL(w0, 0) * %s + FILL(r0, 0) * %s + FILL(i0, 0) * %s) / 1000000", price(cost.DynamoDBWritePerMillion),
				price(cost.DynamoDBReadPerMillion), price(cost.LambdaRequestsPerMillion)) +
				fmt.Sprintf(" + FILL(wi0, 0) * %s / 1000000 + (FILL(wd0, 0) * %d + FILL(sd0, 0) * %d) / 1024000 * %s",
					price(cost.LambdaRequestsPerMillion), workerMB, statusMemoryMB, price(cost.LambdaArmPerGBSecond))
			found := false
			for _, w := range dash.Widgets {
				if !strings.HasPrefix(w.Properties.Title, "USD per lambda") {
					continue
				}
				found = true
				got := map[string]string{} // a metric's id: what it is
				for _, m := range w.Properties.Metrics {
					opts, _ := m[len(m)-1].(map[string]any)
					id, _ := opts["id"].(string)
					if e, ok := opts["expression"].(string); ok {
						got["expression"], got["label"] = e, fmt.Sprint(opts["label"])
						if opts["period"] != 86400.0 {
							t.Errorf("the expression's period: %v, want a day", opts["period"])
						}
						continue
					}
					got[id] = fmt.Sprintf("%v %v %v", m[:len(m)-1], opts["stat"], opts["period"])
				}
				if got["expression"] != want || got["label"] != "a USD" {
					t.Errorf("the dollars of lambda a: %q labelled %q, want %q labelled %q", got["expression"], got["label"], want, "a USD")
				}
				for id, metric := range map[string]string{"w0": "WriteUnits", "r0": "ReadUnits", "i0": "Invocations"} {
					if g := got[id]; g != fmt.Sprintf("[atf/prod %s Lambda a] Sum 86400", metric) {
						t.Errorf("%s is %q, want the day's sum of lambda a's %s", id, g, metric)
					}
				}
				for id, metric := range map[string]string{"wi0": "Invocations", "wd0": "Duration", "sd0": "Duration"} {
					if g := got[id]; !strings.HasPrefix(g, "[AWS/Lambda "+metric+" FunctionName ") || !strings.HasSuffix(g, "] Sum 86400") {
						t.Errorf("%s is %q, want the day's sum of a function's %s", id, g, metric)
					}
				}
			}
			if !found {
				t.Errorf("no widget of dollars per lambda on %s's dashboard", *s.StackName())
			}
		}
	}
}

// joined is a template string: itself, or an Fn::Join's parts with each reference written as
// <id>, so that a dashboard body that names the region reads as JSON.
func joined(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	j, _ := v.(map[string]any)["Fn::Join"].([]any)
	if len(j) != 2 {
		return ""
	}
	var b strings.Builder
	for _, part := range j[1].([]any) {
		if s, ok := part.(string); ok {
			b.WriteString(s)
		} else {
			b.WriteString("<" + ref(part) + ">")
		}
	}
	return b.String()
}
