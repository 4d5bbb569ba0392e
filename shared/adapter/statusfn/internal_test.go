package statusfn

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/openatf/atf/shared/task"
)

// TestErrorCodes: every sentinel crosses the call and comes back matching itself, with its message.
func TestErrorCodes(t *testing.T) {
	for _, c := range errorCodes {
		sent := errorOf(task.Errorf(c.kind, "task t1: %s", c.code))
		if sent.Code != c.code || sent.Message != "task t1: "+c.code {
			t.Errorf("%v answers %+v", c.kind, sent)
		}
		back := sent.err()
		if !errors.Is(back, c.kind) || back.Error() != sent.Message {
			t.Errorf("code %s comes back as %v", c.code, back)
		}
	}
	internal := errorOf(errors.New("dial tcp 10.0.0.7:443: connection refused"))
	if internal.Code != "internal" || internal.Message != "internal error" {
		t.Errorf("an unknown error answers %+v", internal)
	}
	future := (&Error{Code: "gated", Message: "lambda echo is paused"}).err()
	if !strings.Contains(future.Error(), "gated") || !strings.Contains(future.Error(), "lambda echo is paused") {
		t.Errorf("a code this client does not know: %v", future)
	}
}

// TestInvokeOutput: a function error becomes an error that carries the function's message; an
// answer passes through as it is.
func TestInvokeOutput(t *testing.T) {
	ok, err := invokeOutput("atf-status", &awslambda.InvokeOutput{StatusCode: 200, Payload: []byte(`{"v":1}`)})
	if err != nil || string(ok) != `{"v":1}` {
		t.Errorf("an answer: %s, %v", ok, err)
	}
	for _, c := range []struct {
		name    string
		out     *awslambda.InvokeOutput
		want    []string
		notWant string
	}{
		{"panic", &awslambda.InvokeOutput{StatusCode: 200, FunctionError: aws.String("Unhandled"),
			Payload: []byte(`{"errorMessage":"runtime error: invalid memory address","errorType":"runtime.Error","stackTrace":[]}`)},
			[]string{"atf-status", "Unhandled", "runtime.Error: runtime error: invalid memory address"}, "stackTrace"},
		{"timeout", &awslambda.InvokeOutput{StatusCode: 200, FunctionError: aws.String("Unhandled"),
			Payload: []byte(`{"errorMessage":"2026-03-01T10:00:00.000Z 4f1c Task timed out after 3.00 seconds"}`)},
			[]string{"Task timed out after 3.00 seconds"}, "errorMessage"},
		{"not json", &awslambda.InvokeOutput{StatusCode: 200, FunctionError: aws.String("Unhandled"), Payload: []byte("out of memory")},
			[]string{"out of memory"}, ""},
	} {
		payload, err := invokeOutput("atf-status", c.out)
		if err == nil || payload != nil {
			t.Errorf("%s: %s, %v", c.name, payload, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
		if c.notWant != "" && strings.Contains(err.Error(), c.notWant) {
			t.Errorf("%s: %q shows %q", c.name, err, c.notWant)
		}
		for _, kind := range []error{task.ErrStaleLease, task.ErrConflict, task.ErrNotFound} {
			if errors.Is(err, kind) {
				t.Errorf("%s: a broken function reads as %v", c.name, kind)
			}
		}
	}
}
