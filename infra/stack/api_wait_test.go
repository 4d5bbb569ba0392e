package stack

import (
	"testing"
	"time"

	"github.com/openatf/atf/shared/service/frontend"
)

// TestAPITimeoutAllowsTheLongestWait: the API function outlives the longest wait for a task's
// end, with time to read the task and answer, and API Gateway's 29 s cap does too.
func TestAPITimeoutAllowsTheLongestWait(t *testing.T) {
	if apiTimeout > 29*time.Second || apiTimeout < frontend.MaxWait+2*time.Second {
		t.Errorf("API function timeout %s: want at most API Gateway's 29 s and at least the longest wait (%s) + 2 s", apiTimeout, frontend.MaxWait)
	}
}
