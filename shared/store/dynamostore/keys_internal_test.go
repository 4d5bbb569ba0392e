package dynamostore

import (
	"path"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/task"
)

// TestLambdaKeyPatterns: the IAM LeadingKeys patterns of a lambda match the partition keys of its
// task items, payload items, counters and limits' records, and no key of another lambda (even one whose name it
// prefixes), of a gate, or of an index. path.Match stands in for IAM's StringLike: no key holds
// a '/', so their '*' match alike.
func TestLambdaKeyPatterns(t *testing.T) {
	patterns := LambdaKeyPatterns("send")
	matches := func(key string) bool {
		return slices.ContainsFunc(patterns, func(p string) bool { ok, _ := path.Match(p, key); return ok })
	}
	for _, key := range []string{taskPK("send", "06H0C2M4VQ8E2Z3K5N7P9R1T3W"), taskPK("send", "a.b:c-d_e"), countPK("send", 0), countPK("send", 255),
		limitPK("send", task.Limit{Name: "max_running"}), limitPK("send", task.Limit{Name: "key_rate", Key: "tenant-1"})} {
		if !matches(key) {
			t.Errorf("%v does not match %s", patterns, key)
		}
	}
	// A payload item shares its task's pk.
	if pk := payloadKey("send", "x", "ref")[attrPK].(*types.AttributeValueMemberS).Value; !matches(pk) {
		t.Errorf("%v does not match the payload item's %s", patterns, pk)
	}
	for _, key := range []string{taskPK("send-email", "x"), taskPK("sen", "x"), countPK("send-email", 0), limitPK("send-email", task.Limit{Name: "rate"}), gatePK, duePK("send", 0), listPK("send", 0)} {
		if matches(key) {
			t.Errorf("%v matches %s", patterns, key)
		}
	}
}
