package awsfn

import (
	"context"
	"slices"
	"testing"

	"github.com/aws/aws-lambda-go/lambda"
)

// TestAfterEach: what Start runs after each invocation runs once per invocation, after the
// handler, and the handler's answer goes back as it was.
func TestAfterEach(t *testing.T) {
	var log []string
	h := afterEach(lambda.NewHandler(func(_ context.Context, in string) (string, error) {
		log = append(log, "handler "+in)
		return "done " + in, nil
	}), []func(){func() { log = append(log, "after") }})
	for _, in := range []string{`"a"`, `"b"`} {
		out, err := h.Invoke(t.Context(), []byte(in))
		if err != nil || string(out) != `"done `+in[1:2]+`"` {
			t.Errorf("invoke %s: %s, %v", in, out, err)
		}
	}
	if want := []string{"handler a", "after", "handler b", "after"}; !slices.Equal(log, want) {
		t.Errorf("ran %q, want %q", log, want)
	}
}
