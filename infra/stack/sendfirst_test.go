package stack

import (
	"encoding/json"
	"testing"

	"github.com/aws/jsii-runtime-go"
)

// TestSendFirstSetting: an environment sends first unless it says send_first false, as one whose
// workers predate message nonces must while they are upgraded; the API function reads it from
// ATF_SEND_FIRST.
func TestSendFirstSetting(t *testing.T) {
	for text, want := range map[string]bool{`{}`: true, `{"send_first": true}`: true, `{"send_first": false}`: false} {
		var e Environment
		if err := json.Unmarshal([]byte(text), &e); err != nil {
			t.Fatal(err)
		}
		d := &deployment{env: e, prefix: "atf-dev", name: "dev"}
		if got := *d.apiEnv(jsii.String("table"))["ATF_SEND_FIRST"]; got != map[bool]string{true: "true", false: "false"}[want] {
			t.Errorf("%s: ATF_SEND_FIRST=%s, want %v", text, got, want)
		}
	}
}
