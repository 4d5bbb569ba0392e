package main

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/openatf/atf/shared/testkit/lambdaruntime"
)

// TestSigV4Config: requests to an API Gateway host are signed, for --region, else the host's
// region (over AWS_REGION, for which API Gateway would refuse them); requests to any other
// endpoint are not, unless ATF_SIGV4=1.
func TestSigV4Config(t *testing.T) {
	noFile := filepath.Join(t.TempDir(), "none")
	t.Setenv("AWS_CONFIG_FILE", noFile) // no profile's region
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", noFile)
	t.Setenv("AWS_PROFILE", "")
	const gw = "https://abc123xyz.execute-api.eu-west-2.amazonaws.com"
	for _, tc := range []struct {
		endpoint, flag, envRegion, force string
		want                             string // the region signed for; "" for unsigned
	}{
		{endpoint: gw, want: "eu-west-2"},
		{endpoint: gw + "/", envRegion: "us-east-1", want: "eu-west-2"},
		{endpoint: gw, flag: "ap-south-1", envRegion: "us-east-1", want: "ap-south-1"},
		{endpoint: "https://ABC123.EXECUTE-API.SA-EAST-1.AMAZONAWS.COM", want: "sa-east-1"},
		{endpoint: "http://127.0.0.1:8080", envRegion: "us-east-1"},
		{endpoint: "http://127.0.0.1:8080", envRegion: "us-east-1", force: "1", want: "us-east-1"},
		{endpoint: "https://example.com/abc.execute-api.eu-west-1.amazonaws.com", envRegion: "us-east-1"},
		{endpoint: "https://abc.execute-api.eu-west-1.amazonaws.com.example.com", envRegion: "us-east-1"},
	} {
		t.Setenv("AWS_REGION", tc.envRegion)
		t.Setenv("ATF_SIGV4", tc.force)
		cfg, err := sigV4Config(t.Context(), tc.endpoint, tc.flag)
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		got := ""
		if cfg != nil {
			got = cfg.Region
			if got == "" {
				got = "(signed, no region)"
			}
		}
		if got != tc.want {
			t.Errorf("%+v: signs for %q, want %q", tc, got, tc.want)
		}
	}
}

// signingGateway is API Gateway's SigV4 check (lambdaruntime.SigV4, region us-east-1, the
// credentials cliCreds) in front of an atf dev, and how many requests it let through.
type signingGateway struct {
	*httptest.Server
	through atomic.Int64
}

var cliCreds = aws.Credentials{AccessKeyID: "AKIDATFCLI", SecretAccessKey: "cli-secret"}

func newSigningGateway(t *testing.T, devEndpoint string) *signingGateway {
	target, err := url.Parse(devEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	g := &signingGateway{}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Header.Del("Authorization") // the signature is API Gateway's, not atf dev's
	}}
	v := &lambdaruntime.SigV4{Region: "us-east-1", Credentials: lambdaruntime.StaticCredentials(cliCreds)}
	g.Server = httptest.NewServer(v.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.through.Add(1)
		proxy.ServeHTTP(w, r)
	})))
	t.Cleanup(g.Close)
	return g
}

// sigV4Env is the environment of an atf that signs with cliCreds for us-east-1, and no other
// credentials or profile.
func sigV4Env(t *testing.T) []string {
	noFile := filepath.Join(t.TempDir(), "none")
	return append(os.Environ(),
		"ATF_SIGV4=1", "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID="+cliCreds.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY="+cliCreds.SecretAccessKey, "AWS_SESSION_TOKEN=", "AWS_PROFILE=",
		"AWS_CONFIG_FILE="+noFile, "AWS_SHARED_CREDENTIALS_FILE="+noFile)
}

// TestCLISignsSigV4: with ATF_SIGV4=1 and credentials in the environment, schedule, get, list
// and lambdas work through API Gateway's SigV4 check in front of atf dev, every request signed;
// unsigned, with a wrong secret or for another region (--region over AWS_REGION) the CLI exits
// non-zero naming the IAM action, the route and the gateway's message.
func TestCLISignsSigV4(t *testing.T) {
	dev := startDev(t, handlersDir(t), embedded(t))
	gw := newSigningGateway(t, dev.client.Endpoint)
	cli := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(atfBin, append(args, "--endpoint", gw.URL)...)
		cmd.Env = append(sigV4Env(t), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := cli(nil, "schedule", "echo", "--id", "signed-1", "--payload", `{"signed":true}`); err != nil || !strings.Contains(out, "signed-1") {
		t.Fatalf("schedule: %v\n%s", err, out)
	}
	waitTerminal(t, dev.client, "echo", "signed-1")
	if out, err := cli(nil, "get", "echo", "signed-1"); err != nil || !regexp.MustCompile(`result:\s+\{"signed":true\}`).MatchString(out) {
		t.Fatalf("get: %v\n%s", err, out)
	}
	if out, err := cli(nil, "list", "echo", "--status", "success", "--limit", "5"); err != nil || !strings.Contains(out, "signed-1") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if out, err := cli(nil, "lambdas"); err != nil || !strings.Contains(out, "echo") {
		t.Fatalf("lambdas: %v\n%s", err, out)
	}
	if n := gw.through.Load(); n < 4 {
		t.Errorf("%d signed requests went through; want at least 4", n)
	}
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"ATF_SIGV4="}, nil, "API Gateway refused execute-api:Invoke on GET /v1/lambdas: Missing Authentication Token"},
		{[]string{"AWS_SECRET_ACCESS_KEY=wrong"}, nil, "API Gateway refused execute-api:Invoke on GET /v1/lambdas: The request signature we calculated does not match"},
		{nil, []string{"--region", "eu-west-1"}, "API Gateway refused execute-api:Invoke on GET /v1/lambdas: Credential should be scoped to a valid region."},
		{[]string{"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_EC2_METADATA_DISABLED=true"}, nil, "no AWS credentials to sign the request for API Gateway with"},
	} {
		before := gw.through.Load()
		out, err := cli(tc.env, append([]string{"lambdas"}, tc.args...)...)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%v %v: %v\n%s\nwant an error with %q", tc.env, tc.args, err, out, tc.want)
		}
		if gw.through.Load() != before {
			t.Errorf("%v %v: a request went through", tc.env, tc.args)
		}
	}
}
