package stack

import (
	"slices"
	"strings"
	"testing"

	"github.com/openatf/atf/shared/queue/sqsqueue"
)

// statementsOf returns, for the role at construct path rolePath, each statement of its policies:
// its actions and the construct paths of its resources.
func statementsOf(s *synthesized, rolePath string) (out []struct{ actions, resources []string }) {
	all := s.json["Resources"].(map[string]any)
	for _, p := range s.resources("AWS::IAM::Policy") {
		attached := false
		for _, r := range refs(props(p)["Roles"]) {
			if pathOf(all, r) == rolePath {
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
				one.resources = append(one.resources, pathOf(all, r))
			}
			out = append(out, one)
		}
	}
	return out
}

// queueARN is the ARN pattern of an environment's queues, as refs renders it: suffix * for
// every queue, *-dlq for every dead-letter queue.
func queueARN(env, suffix string) string {
	return "arn:<AWS::Partition>:sqs:<AWS::Region>:<AWS::AccountId>:atf-" + env + "-" + suffix
}

// TestConsumerDrainGrants: the consumer may receive and delete the messages of every lambda's
// dead-letter queues (the drain), and only those: it may do so on the environment's dead-letter
// queues (atf-<env>-*-dlq, by pattern: the core knows no lambda) and on no other queue, and
// nothing else there but send.
func TestConsumerDrainGrants(t *testing.T) {
	s := environments(t)["staging"]
	var drains [][]string
	for _, st := range statementsOf(s, "Consumer/Role/Resource") {
		receives := slices.Contains(st.actions, "sqs:ReceiveMessage") || slices.Contains(st.actions, "sqs:DeleteMessage")
		if !receives {
			continue
		}
		if !slices.Equal(st.resources, []string{queueARN("staging", "*-dlq")}) {
			t.Errorf("the consumer may receive or delete on %v, want the dead-letter queues atf-staging-*-dlq only", st.resources)
		}
		drains = append(drains, slices.Sorted(slices.Values(st.actions)))
	}
	want := slices.Sorted(slices.Values(drainActions))
	if len(drains) != 1 || !slices.Equal(drains[0], want) {
		t.Errorf("the consumer's drain statements %v, want one of %v", drains, want)
	}
	for _, e := range mustLoadRegistry(t).Lambdas {
		for _, p := range e.Priorities {
			name, err := sqsqueue.QueueName("atf-staging", e.Name, p)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(sqsqueue.DLQName(name), sqsqueue.DLQSuffix) || !strings.HasPrefix(name, "atf-staging-") {
				t.Errorf("queue %s is outside the pattern atf-staging-*(-dlq)", name)
			}
		}
	}
}
