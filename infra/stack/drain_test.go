package stack

import (
	"slices"
	"strings"
	"testing"
)

// statementsOf returns, for the role at construct path rolePath, each statement of its policies:
// its actions and the construct paths of its resources.
func statementsOf(s *synthesized, rolePath string) (out []struct{ actions, resources []string }) {
	all := s.json["Resources"].(map[string]any)
	for _, p := range s.resources("AWS::IAM::Policy") {
		attached := false
		for _, r := range refs(props(p)["Roles"]) {
			if path(all[r].(map[string]any)) == rolePath {
				attached = true
			}
		}
		if !attached {
			continue
		}
		for _, st := range list(props(p)["PolicyDocument"].(map[string]any)["Statement"]) {
			st := st.(map[string]any)
			var one struct{ actions, resources []string }
			for _, a := range list(st["Action"]) {
				one.actions = append(one.actions, a.(string))
			}
			for _, r := range refs(st["Resource"]) {
				one.resources = append(one.resources, path(all[r].(map[string]any)))
			}
			out = append(out, one)
		}
	}
	return out
}

// TestConsumerDrainGrants: the consumer may receive and delete the messages of every lambda's
// dead-letter queues (the drain), and only those: on a dead-letter queue it may do nothing else,
// and it may receive or delete on no other queue.
func TestConsumerDrainGrants(t *testing.T) {
	reg := mustLoadRegistry(t)
	s := environments(t)["staging"]
	granted := map[string][]string{} // dead-letter queue -> actions
	for _, st := range statementsOf(s, "Consumer/Role/Resource") {
		dlqs := 0
		for _, r := range st.resources {
			if strings.Contains(r, "/Queues/Dlq-") {
				dlqs++
				granted[r] = append(granted[r], st.actions...)
			}
		}
		receives := slices.Contains(st.actions, "sqs:ReceiveMessage") || slices.Contains(st.actions, "sqs:DeleteMessage")
		if receives && dlqs != len(st.resources) {
			t.Errorf("the consumer may receive or delete on %v, not only dead-letter queues", st.resources)
		}
		if dlqs > 0 && dlqs != len(st.resources) {
			t.Errorf("a statement grants dead-letter queues and other resources together: %v", st.resources)
		}
	}
	for _, e := range reg.Lambdas {
		for _, p := range e.Priorities {
			dlq := "Lambda-" + e.Name + "/Queues/Dlq-" + p + "/Resource"
			got := slices.Sorted(slices.Values(granted[dlq]))
			got = slices.Compact(got)
			want := slices.Sorted(slices.Values(drainActions))
			if !slices.Equal(got, want) {
				t.Errorf("the consumer may %v on %s, want %v", got, dlq, want)
			}
		}
	}
}
