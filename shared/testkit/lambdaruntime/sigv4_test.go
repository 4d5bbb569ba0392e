package lambdaruntime_test

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/openatf/atf/shared/testkit/lambdaruntime"
)

// TestSigV4: the verifier lets in what the SDK's signer signed for execute-api in its region,
// by known credentials, within 5 minutes of its clock, as it was signed (an escaped path, a
// query, a body); it refuses with API Gateway's 403 messages a request that is unsigned, signed
// with a wrong secret, by an unknown key, for another region or service, too old or too new, one
// whose body, path, query or a signed header changed after signing, one that leaves host or
// x-amz-date unsigned, one without the session token its credentials have and one with a token
// its credentials do not have. A refused request does not reach the handler behind it.
func TestSigV4(t *testing.T) {
	t.Parallel()
	clock := time.Date(2026, 11, 27, 23, 30, 0, 0, time.UTC)
	good := aws.Credentials{AccessKeyID: "AKIDGOOD", SecretAccessKey: "secret-good"}
	session := aws.Credentials{AccessKeyID: "ASIASESSION", SecretAccessKey: "secret-session", SessionToken: "token-1"}
	v := &lambdaruntime.SigV4{
		Region: "eu-west-1", Credentials: lambdaruntime.StaticCredentials(good, session),
		Now: func() time.Time { return clock },
	}
	var (
		mu      sync.Mutex
		reached []string // what got through, "METHOD URI BODY"
	)
	srv := httptest.NewServer(v.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		reached = append(reached, r.Method+" "+r.URL.RequestURI()+" "+string(body))
	})))
	throughs := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(reached)
	}
	defer srv.Close()

	type signing struct {
		creds            aws.Credentials
		region, service  string
		at               time.Time
		signedBody       string // signed instead of the body sent, if not empty
		signedPath       string // the path signed, when another is sent
		pathOnce         bool   // the path encoded once, as S3's signing does
		header           string // a header set after signing, "Name: value"
		unsigned, bearer bool
		byHand           string // signed by handSign with these SignedHeaders, not the SDK
	}
	const mismatch = lambdaruntime.MsgSignatureMismatch
	for _, tc := range []struct {
		name, method, path, body string
		s                        signing
		want                     string // the 403 message; "" for let in
	}{
		{name: "good get", method: "GET", path: "/v1/lambdas/echo/tasks?status=new&limit=5&collection=a+b"},
		{name: "good post", method: "POST", path: "/v1/lambdas/echo/tasks", body: `{"payload":{"n":1}}`},
		{name: "good escaped path", method: "GET", path: "/v1/lambdas/echo/tasks/id%20with%2Fslash"},
		{name: "good session", method: "GET", path: "/v1/lambdas", s: signing{creds: session}},
		{name: "good at the skew's edge", method: "GET", path: "/v1/lambdas", s: signing{at: clock.Add(-lambdaruntime.MaxSkew)}},
		{name: "unsigned", method: "GET", path: "/v1/lambdas", s: signing{unsigned: true}, want: lambdaruntime.MsgMissingToken},
		{name: "bearer token", method: "GET", path: "/v1/lambdas", s: signing{bearer: true}, want: "Authorization header requires 'Credential' parameter."},
		{name: "wrong secret", method: "GET", path: "/v1/lambdas", s: signing{creds: aws.Credentials{AccessKeyID: "AKIDGOOD", SecretAccessKey: "wrong"}}, want: mismatch},
		{name: "unknown key", method: "GET", path: "/v1/lambdas", s: signing{creds: aws.Credentials{AccessKeyID: "AKIDOTHER", SecretAccessKey: "secret-good"}}, want: lambdaruntime.MsgInvalidToken},
		{name: "tampered body", method: "POST", path: "/v1/lambdas/echo/tasks", body: `{"payload":{"n":2}}`, s: signing{signedBody: `{"payload":{"n":1}}`}, want: mismatch},
		{name: "tampered path", method: "POST", path: "/v1/lambdas/other/tasks", body: `{}`, s: signing{signedPath: "/v1/lambdas/echo/tasks"}, want: mismatch},
		{name: "path encoded once", method: "GET", path: "/v1/lambdas/echo/tasks/a%20b", s: signing{pathOnce: true}, want: mismatch},
		{name: "tampered query", method: "GET", path: "/v1/lambdas/echo/tasks?status=dead", s: signing{signedPath: "/v1/lambdas/echo/tasks?status=new"}, want: mismatch},
		{name: "tampered header", method: "POST", path: "/v1/lambdas/echo/tasks", body: `{}`, s: signing{header: "Content-Type: text/plain"}, want: mismatch},
		{name: "good by hand", method: "GET", path: "/v1/lambdas", s: signing{byHand: "host;x-amz-date"}},
		{name: "date not signed", method: "GET", path: "/v1/lambdas", s: signing{byHand: "host"}, want: lambdaruntime.MsgDateNotSigned},
		{name: "host not signed", method: "GET", path: "/v1/lambdas", s: signing{byHand: "x-amz-date"}, want: lambdaruntime.MsgHostNotSigned},
		{name: "token without session", method: "GET", path: "/v1/lambdas", s: signing{header: "X-Amz-Security-Token: stale"}, want: lambdaruntime.MsgInvalidToken},
		{name: "session token missing", method: "GET", path: "/v1/lambdas", s: signing{creds: session, header: "X-Amz-Security-Token: "}, want: lambdaruntime.MsgInvalidToken},
		{name: "old", method: "GET", path: "/v1/lambdas", s: signing{at: clock.Add(-lambdaruntime.MaxSkew - time.Second)},
			want: "Signature expired: 20261127T232459Z is now earlier than 20261127T232500Z (20261127T233000Z - 5 min.)"},
		{name: "future", method: "GET", path: "/v1/lambdas", s: signing{at: clock.Add(lambdaruntime.MaxSkew + time.Second)}, want: "Signature not yet current:"},
		{name: "other region", method: "GET", path: "/v1/lambdas", s: signing{region: "us-east-1"}, want: "Credential should be scoped to a valid region."},
		{name: "other service", method: "GET", path: "/v1/lambdas", s: signing{service: "lambda"}, want: "Credential should be scoped to correct service: 'execute-api'."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			if s.creds.AccessKeyID == "" {
				s.creds = good
			}
			if s.at.IsZero() {
				s.at = clock
			}
			signedPath := tc.path
			if s.signedPath != "" {
				signedPath = s.signedPath
			}
			signedBody := tc.body
			if s.signedBody != "" {
				signedBody = s.signedBody
			}
			req, err := http.NewRequest(tc.method, srv.URL+signedPath, strings.NewReader(signedBody))
			if err != nil {
				t.Fatal(err)
			}
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			switch {
			case s.bearer:
				req.Header.Set("Authorization", "Bearer some-token")
			case s.byHand != "":
				handSign(req, s.creds, "eu-west-1", s.at, s.byHand)
			case !s.unsigned:
				sum := sha256.Sum256([]byte(signedBody))
				signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = s.pathOnce })
				err := signer.SignHTTP(context.Background(), s.creds, req, hex.EncodeToString(sum[:]),
					cmp.Or(s.service, "execute-api"), cmp.Or(s.region, "eu-west-1"), s.at)
				if err != nil {
					t.Fatal(err)
				}
			}
			// What is sent, where it differs from what was signed.
			sent, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			sent.Header = req.Header
			if name, value, ok := strings.Cut(s.header, ": "); ok {
				sent.Header.Set(name, value)
			}
			before := throughs()
			resp, err := srv.Client().Do(sent)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got struct{ Message string }
			data, _ := io.ReadAll(resp.Body)
			_ = json.Unmarshal(data, &got)
			if tc.want == "" {
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%d %s; want it let in", resp.StatusCode, data)
				}
				return
			}
			if resp.StatusCode != http.StatusForbidden || !strings.HasPrefix(got.Message, tc.want) {
				t.Errorf("%d %s; want 403 %q", resp.StatusCode, data, tc.want)
			}
			if throughs() != before {
				t.Errorf("a refused request reached the handler")
			}
		})
	}
	if !slices.Contains(reached, `POST /v1/lambdas/echo/tasks {"payload":{"n":1}}`) {
		t.Errorf("the handler got %q; want the good post with its body", reached)
	}
}

// handSign signs req, a GET without query or body, as a signer that signs only the headers
// signedHeaders names (of host and x-amz-date) would: the SDK's signer always signs both.
func handSign(req *http.Request, creds aws.Credentials, region string, at time.Time, signedHeaders string) {
	amzDate := at.UTC().Format("20060102T150405Z")
	req.Header.Set("X-Amz-Date", amzDate)
	var canonicalHeaders string
	for _, name := range strings.Split(signedHeaders, ";") {
		value := amzDate
		if name == "host" {
			value = req.URL.Host
		}
		canonicalHeaders += name + ":" + value + "\n"
	}
	hash := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	canonical := strings.Join([]string{req.Method, req.URL.EscapedPath(), "", canonicalHeaders, signedHeaders, hash("")}, "\n")
	scope := amzDate[:8] + "/" + region + "/execute-api/aws4_request"
	key := []byte("AWS4" + creds.SecretAccessKey)
	for _, part := range strings.Split(scope, "/") {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(part))
		key = m.Sum(nil)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(strings.Join([]string{"AWS4-HMAC-SHA256", amzDate, scope, hash(canonical)}, "\n")))
	req.Header.Set("Authorization", fmt.Sprintf("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%x",
		creds.AccessKeyID, scope, signedHeaders, m.Sum(nil)))
}

// TestAPIGatewayAuth: with Auth, the gateway answers a path no route has 404 (before the
// signature, as API Gateway does), refuses an unsigned or wrongly signed request to a route with
// 403 without invoking the function, and passes a signed one on to it.
func TestAPIGatewayAuth(t *testing.T) {
	t.Parallel()
	f := newFunction(t, "serve", 5*time.Second)
	creds := aws.Credentials{AccessKeyID: "AKIDGATEWAY", SecretAccessKey: "gateway-secret"}
	srv := httptest.NewServer(lambdaruntime.APIGateway{Function: f, Routes: []string{"POST /v1/lambdas/{lambda}/tasks"},
		Auth: &lambdaruntime.SigV4{Region: "eu-west-1", Credentials: lambdaruntime.StaticCredentials(creds)}})
	defer srv.Close()
	send := func(path, secret string) (int, string) {
		t.Helper()
		body := `{"do":"proxy"}`
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if secret != "" {
			sum := sha256.Sum256([]byte(body))
			signing := aws.Credentials{AccessKeyID: creds.AccessKeyID, SecretAccessKey: secret}
			if err := v4.NewSigner().SignHTTP(t.Context(), signing, req, hex.EncodeToString(sum[:]), "execute-api", "eu-west-1", time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	if code, body := send("/v1/nothing/here", ""); code != http.StatusNotFound || body != `{"message":"Not Found"}` {
		t.Errorf("no route, unsigned: %d %s; want 404", code, body)
	}
	if code, body := send("/v1/lambdas/echo/tasks", ""); code != http.StatusForbidden || body != `{"message":"Missing Authentication Token"}` {
		t.Errorf("unsigned: %d %s; want 403 Missing Authentication Token", code, body)
	}
	if code, body := send("/v1/lambdas/echo/tasks", "wrong"); code != http.StatusForbidden || !strings.Contains(body, "signature we calculated does not match") {
		t.Errorf("wrongly signed: %d %s; want 403", code, body)
	}
	if f.Starts() != 0 {
		t.Errorf("refused requests started the function %d times", f.Starts())
	}
	if code, body := send("/v1/lambdas/echo/tasks", creds.SecretAccessKey); code != http.StatusOK || body != `/v1/lambdas/{lambda}/tasks lambda=echo` {
		t.Errorf("signed: %d %s; want the function's answer", code, body)
	}
}
