package functions_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/adapter/dashboard"
	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/testkit/lambdaruntime"
)

// signedClients runs what talks to a deployed API against the deployed stack, whose gateway
// (c's endpoint) checks SigV4 as the routes' IAM authorization does: a request without a
// signature is refused with 403, which the client reports naming the IAM action and the route;
// the atf binary with ATF_SIGV4=1 and the environment's credentials schedules, gets (waiting
// for the end), lists and lists the lambdas; the dashboard's proxy reads a task, signed, and
// answers that the charts need atf dev.
func signedClients(t *testing.T, c *client.Client) {
	ctx := t.Context()
	_, err := (&client.Client{Endpoint: c.Endpoint}).Lambdas(ctx)
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusForbidden ||
		!strings.Contains(err.Error(), "API Gateway refused execute-api:Invoke on GET /v1/lambdas: "+lambdaruntime.MsgMissingToken) {
		t.Errorf("an unsigned request: %v; want API Gateway's 403, naming execute-api:Invoke and the route", err)
	}

	bin := filepath.Join(t.TempDir(), "atf")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/atf").CombinedOutput(); err != nil {
		t.Fatalf("build atf: %v\n%s", err, out)
	}
	cli := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append(args, "--endpoint", c.Endpoint)...)
		cmd.Env = append(os.Environ(), "ATF_SIGV4=1", "AWS_REGION="+lambdaruntime.DefaultRegion)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("atf %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	cli("schedule", "echo", "--id", "cli-signed", "--payload", `{"cli":true}`)
	if out := cli("get", "echo", "cli-signed", "--wait", "60s"); !regexp.MustCompile(`status:\s+success`).MatchString(out) || !strings.Contains(out, `{"cli":true}`) {
		t.Errorf("atf get --wait: %s; want success with the payload as result", out)
	}
	if out := cli("list", "echo", "--status", "success"); !strings.Contains(out, "cli-signed") {
		t.Errorf("atf list: %s; want cli-signed", out)
	}
	if out := cli("lambdas"); !regexp.MustCompile(`(?m)^echo\s`).MatchString(out) || !regexp.MustCompile(`(?m)^sleep\s`).MatchString(out) {
		t.Errorf("atf lambdas: %s; want echo and sleep", out)
	}

	endpoint, err := url.Parse(c.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(ctx context.Context, req *http.Request, body []byte) error {
		return client.SignSigV4(ctx, c.SigV4, req, body, time.Now())
	}
	proxy := httptest.NewServer(dashboard.Proxy(endpoint, sign, nil))
	defer proxy.Close()
	if status, body := httpGet(t, proxy.URL+"/v1/lambdas/echo/tasks/cli-signed"); status != http.StatusOK || !strings.Contains(body, `"cli-signed"`) {
		t.Errorf("a task through the dashboard's proxy: %d %s", status, body)
	}
	if status, body := httpGet(t, proxy.URL+dashboard.ActivityPath); status != http.StatusNotImplemented || !strings.Contains(body, "run atf dev") {
		t.Errorf("the charts through the dashboard's proxy: %d %s; want 501 saying they need atf dev", status, body)
	}
}
