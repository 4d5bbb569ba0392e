package local_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/worker"
)

// hangLimit turns a connection the server never closes into a failure. It is no timing
// assertion: the server's limits under test are a fraction of it.
const hangLimit = 20 * time.Second

func startWith(t *testing.T, c local.Config) *local.Stack {
	t.Helper()
	mux := worker.NewMux()
	mux.HandleFunc("work", func(context.Context, worker.Task) (json.RawMessage, error) { return nil, nil })
	c.Addr, c.DBPath, c.Mux = "127.0.0.1:0", filepath.Join(t.TempDir(), "atf.db"), mux
	c.Logger = slog.New(slog.DiscardHandler)
	s, err := local.Start(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	return s
}

// closedByServer reads conn, through r, until the server closes it, and fails if it does not.
func closedByServer(t *testing.T, r io.Reader, conn net.Conn, what string) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(hangLimit))
	_, err := io.Copy(io.Discard, r)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("%s: the server did not close the connection: %v", what, err)
	}
}

// TestSlowAndIdleConnectionsClosed: a client that sends its body slowly, and a kept-alive
// connection left idle, are closed by the server once its read and idle timeouts pass.
func TestSlowAndIdleConnectionsClosed(t *testing.T) {
	const short, long = 200 * time.Millisecond, time.Hour
	t.Run("slow body", func(t *testing.T) {
		s := startWith(t, local.Config{HTTP: local.HTTPLimits{ReadTimeout: short, WriteTimeout: long, IdleTimeout: long}})
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// The headers promise a body of 1000 bytes; one comes, the rest never do.
		fmt.Fprintf(conn, "POST /v1/lambdas/work/tasks HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", s.Addr())
		conn.SetReadDeadline(time.Now().Add(hangLimit))
		r := bufio.NewReader(conn)
		if resp, err := http.ReadResponse(r, nil); err == nil && resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("a body that never ends: %d, want 408", resp.StatusCode)
		}
		closedByServer(t, r, conn, "a body that never ends")
	})
	t.Run("idle", func(t *testing.T) {
		s := startWith(t, local.Config{HTTP: local.HTTPLimits{ReadTimeout: long, WriteTimeout: long, IdleTimeout: short}})
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /v1/lambdas HTTP/1.1\r\nHost: %s\r\n\r\n", s.Addr())
		r := bufio.NewReader(conn)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("first request: %d, close %v", resp.StatusCode, resp.Close)
		}
		closedByServer(t, r, conn, "an idle kept-alive connection")
	})
}

// TestListenerGuard: atf dev's listener refuses a foreign Host or Origin, and, given a token,
// requests without it; the Go client sends it.
func TestListenerGuard(t *testing.T) {
	s := startWith(t, local.Config{Token: "s3cret"})
	for _, tc := range []struct {
		host, origin, token string
		status              int
	}{
		{s.Addr(), "", "s3cret", 200},
		{"rebound.example:" + port(s.Addr()), "", "s3cret", 403},
		{s.Addr(), "https://evil.example", "s3cret", 403},
		{s.Addr(), "", "", 401},
	} {
		req, _ := http.NewRequest("GET", "http://"+s.Addr()+"/v1/lambdas", nil)
		req.Host = tc.host
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("Host %s, Origin %q, token %q: %d, want %d", tc.host, tc.origin, tc.token, resp.StatusCode, tc.status)
		}
	}
	c := &client.Client{Endpoint: "http://" + s.Addr(), Token: "s3cret"}
	if _, err := c.Lambdas(t.Context()); err != nil {
		t.Errorf("the client with the token: %v", err)
	}
	c.Token = ""
	var apiErr *client.Error
	if _, err := c.Lambdas(t.Context()); !errors.As(err, &apiErr) || apiErr.Status != 401 {
		t.Errorf("the client without the token: %v, want a 401", err)
	}
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// TestHeaderBytesLimited: headers over the listener's limit are refused with 431, not buffered.
func TestHeaderBytesLimited(t *testing.T) {
	s := startWith(t, local.Config{})
	req, _ := http.NewRequest("GET", "http://"+s.Addr()+"/v1/lambdas", nil)
	req.Header.Set("X-Pad", strings.Repeat("x", 2*local.DefaultHTTPLimits.MaxHeaderBytes))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("headers of %d bytes: %d, want 431", 2*local.DefaultHTTPLimits.MaxHeaderBytes, resp.StatusCode)
	}
}

// TestBeyondLoopbackNeedsToken: a listener beyond loopback also takes the machine's own loopback,
// where the Host and Origin checks cannot tell a web page from a client; atf dev refuses to start
// there without a token, and starts with one.
func TestBeyondLoopbackNeedsToken(t *testing.T) {
	mux := worker.NewMux()
	mux.HandleFunc("work", func(context.Context, worker.Task) (json.RawMessage, error) { return nil, nil })
	c := local.Config{Addr: "0.0.0.0:0", DBPath: filepath.Join(t.TempDir(), "atf.db"), Mux: mux, Logger: slog.New(slog.DiscardHandler)}
	if s, err := local.Start(context.Background(), c); err == nil || !strings.Contains(err.Error(), "token") {
		if s != nil {
			s.Stop(context.Background())
		}
		t.Fatalf("Start on 0.0.0.0 without a token: %v, want an error asking for one", err)
	}
	c.Token = "s3cret"
	s, err := local.Start(context.Background(), c)
	if err != nil {
		t.Fatalf("Start on 0.0.0.0 with a token: %v", err)
	}
	s.Stop(context.Background())
}
