package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/openatf/atf/shared/adapter/dashboard"
	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/testkit/lambdaruntime"
)

// TestProxySigns: the proxy sends the page's calls to the endpoint signed, as API Gateway's IAM
// authorization checks them (a read with its query, a schedule with its body), without the page's
// token, cookies or other headers; API Gateway's refusal comes back as an API error that names the
// IAM action and the route; a call it cannot sign is answered 502 saying why, and atf dev's own
// endpoints (charts, costs, limits, keys) 501, without a call.
func TestProxySigns(t *testing.T) {
	t.Parallel()
	creds := aws.Credentials{AccessKeyID: "AKIDDASH", SecretAccessKey: "dash-secret"}
	v := &lambdaruntime.SigV4{Region: "eu-central-1", Credentials: lambdaruntime.StaticCredentials(creds)}
	var (
		mu      sync.Mutex
		reached []*http.Request
		bodies  []string
	)
	api := httptest.NewServer(v.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		reached, bodies = append(reached, r), append(bodies, string(body))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"lambdas":[]}`)
	})))
	defer api.Close()
	endpoint, _ := url.Parse(api.URL)
	secret := creds
	sign := func(ctx context.Context, req *http.Request, body []byte) error {
		cfg := &aws.Config{Region: "eu-central-1", Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			mu.Lock()
			defer mu.Unlock()
			if secret.AccessKeyID == "" {
				return aws.Credentials{}, errors.New("no credentials in the chain")
			}
			return secret, nil
		})}
		return client.SignSigV4(ctx, cfg, req, body, time.Now())
	}
	proxy := httptest.NewServer(dashboard.Proxy(endpoint, sign, nil))
	defer proxy.Close()
	call := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, proxy.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer page-token")
		req.Header.Set("Cookie", "session=1")
		req.Header.Set("X-Other", "x")
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	if code, body := call("GET", "/v1/lambdas/echo/tasks?status=new&limit=5", ""); code != 200 {
		t.Fatalf("a read: %d %s", code, body)
	}
	if code, body := call("POST", "/v1/lambdas/echo/tasks", `{"id":"x"}`); code != 200 {
		t.Fatalf("a schedule: %d %s", code, body)
	}
	mu.Lock()
	if len(reached) != 2 || reached[0].URL.RawQuery != "status=new&limit=5" && reached[0].URL.RawQuery != "limit=5&status=new" || bodies[1] != `{"id":"x"}` {
		t.Errorf("the API got %d requests, %v", len(reached), bodies)
	}
	for _, r := range reached {
		if r.Header.Get("Cookie") != "" || r.Header.Get("X-Other") != "" || strings.HasPrefix(r.Header.Get("Authorization"), "Bearer") {
			t.Errorf("the page's headers went on to the API: %v", r.Header)
		}
	}
	secret.SecretAccessKey = "stale"
	mu.Unlock()
	code, body := call("GET", "/v1/lambdas", "")
	var e struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal([]byte(body), &e)
	if code != http.StatusForbidden || !strings.HasPrefix(e.Error.Message, "API Gateway refused execute-api:Invoke on GET /v1/lambdas: The request signature we calculated") {
		t.Errorf("a refused call: %d %s; want 403 with an API error naming execute-api:Invoke and the route", code, body)
	}
	mu.Lock()
	secret = aws.Credentials{}
	n := len(reached)
	mu.Unlock()
	if code, body := call("GET", "/v1/lambdas", ""); code != http.StatusBadGateway || !strings.Contains(body, "no AWS credentials to sign the request") {
		t.Errorf("without credentials: %d %s; want 502 saying so", code, body)
	}
	if code, body := call("GET", dashboard.ActivityPath+"?lambda=echo", ""); code != http.StatusNotImplemented || !strings.Contains(body, `"not_available"`) || !strings.Contains(body, "run atf dev") {
		t.Errorf("the charts' endpoint: %d %s; want 501 not_available", code, body)
	}
	if code, body := call("GET", dashboard.CostsPath, ""); code != http.StatusNotImplemented || !strings.Contains(body, `"not_available"`) || !strings.Contains(body, "CloudWatch dashboard") {
		t.Errorf("the costs' endpoint: %d %s; want 501 not_available, pointing to the CloudWatch dashboard", code, body)
	}
	for _, path := range []string{dashboard.LimitsPath, dashboard.KeysPath + "?lambda=echo"} {
		if code, body := call("GET", path, ""); code != http.StatusNotImplemented || !strings.Contains(body, `"not_available"`) || !strings.Contains(body, "StartsHeld") {
			t.Errorf("GET %s: %d %s; want 501 not_available, pointing to StartsHeld", path, code, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reached) != n {
		t.Errorf("a call that was not signed, or the charts', reached the API")
	}
}
