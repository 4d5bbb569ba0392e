package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/local"
	"github.com/openatf/atf/shared/task"
)

// TestIdleConnectionsCloseBeforeTheServers: the client drops an idle connection before atf dev
// would close it, so that it never sends a request on a connection the server is closing.
func TestIdleConnectionsCloseBeforeTheServers(t *testing.T) {
	if got, server := client.NewTransport().IdleConnTimeout, local.DefaultHTTPLimits.IdleTimeout; got <= 0 || got >= server {
		t.Errorf("client IdleConnTimeout %s, want under atf dev's IdleTimeout %s", got, server)
	}
}

// resettingServer answers every request, but resets the connection of the first request that
// comes on a connection already used, after reading it: what a client sees when it reuses a
// connection just as the server closes it for idling. It keeps every request it read.
type resettingServer struct {
	*httptest.Server
	reset    atomic.Bool
	mu       sync.Mutex
	requests []string // "METHOD /path body"
	deleted  bool
}

type connKey struct{}

func newResettingServer(t *testing.T) *resettingServer {
	s := &resettingServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, new(atomic.Int32))
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *resettingServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.requests = append(s.requests, r.Method+" "+r.URL.Path+" "+string(body))
	s.mu.Unlock()
	if r.Context().Value(connKey{}).(*atomic.Int32).Add(1) > 1 && !s.reset.Swap(true) {
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.(*net.TCPConn).SetLinger(0) // close with a reset, as a server does to a late request
		conn.Close()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodDelete:
		s.mu.Lock()
		gone := s.deleted
		s.deleted = true
		s.mu.Unlock()
		if gone {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":{"code":"not_found","message":"no such schedule"}}`))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == "/v1/lambdas/echo/tasks":
		var req struct{ ID string }
		json.Unmarshal(body, &req)
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]string{"id": req.ID, "lambda": "echo", "status": "new"})
	default:
		w.Write([]byte(`{}`))
	}
}

// sent returns the requests the server read that match method and path.
func (s *resettingServer) sent(method, path string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.requests {
		if len(r) > len(method)+len(path)+1 && r[:len(method)+len(path)+1] == method+" "+path {
			out = append(out, r)
		}
	}
	return out
}

// TestRetriesOnAClosedConnection: a request safe to send again that meets a connection the
// server closed is sent again and succeeds, on a new connection; one that is not safe is sent
// once and its caller gets the error.
func TestRetriesOnAClosedConnection(t *testing.T) {
	for _, tc := range []struct {
		name, method, path string
		call               func(context.Context, *client.Client) error
		safe               bool
	}{
		{"a schedule without an id", "POST", "/v1/lambdas/echo/tasks", func(ctx context.Context, c *client.Client) error {
			tk, _, err := c.Schedule(ctx, "echo", client.ScheduleRequest{Payload: []byte(`{}`)})
			if err == nil && tk.ID == "" {
				err = errors.New("the task came back without an id")
			}
			return err
		}, true},
		{"a read", "GET", "/v1/lambdas/echo/tasks/a", func(ctx context.Context, c *client.Client) error {
			_, err := c.Get(ctx, "echo", "a")
			return err
		}, true},
		{"a gate set", "PUT", "/v1/lambdas/echo/gate", func(ctx context.Context, c *client.Client) error {
			_, err := c.SetGate(ctx, "echo", "", task.GatePause)
			return err
		}, true},
		{"a schedule's pause", "POST", "/v1/lambdas/echo/schedules/s/pause", func(ctx context.Context, c *client.Client) error {
			_, err := c.PauseSchedule(ctx, "echo", "s")
			return err
		}, true},
		{"a schedule's delete", "DELETE", "/v1/lambdas/echo/schedules/s", func(ctx context.Context, c *client.Client) error {
			return c.DeleteSchedule(ctx, "echo", "s")
		}, true},
		{"a cancel", "POST", "/v1/lambdas/echo/tasks/a/cancel", func(ctx context.Context, c *client.Client) error {
			_, err := c.Cancel(ctx, "echo", "a")
			return err
		}, false},
		{"a redrive", "POST", "/v1/lambdas/echo/tasks/a/redrive", func(ctx context.Context, c *client.Client) error {
			_, err := c.Redrive(ctx, "echo", "a", task.RedriveOptions{})
			return err
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newResettingServer(t)
			c := &client.Client{Endpoint: srv.URL}
			if _, err := c.Lambdas(t.Context()); err != nil { // opens the connection the call reuses
				t.Fatal(err)
			}
			err := tc.call(t.Context(), c)
			sent := srv.sent(tc.method, tc.path)
			if !srv.reset.Load() {
				t.Fatal("the server reset no request: the call did not reuse the connection")
			}
			if tc.safe {
				if err != nil || len(sent) != 2 {
					t.Errorf("got %v after %d sends, want success on the second", err, len(sent))
				}
				if len(sent) == 2 && sent[0] != sent[1] {
					t.Errorf("the retry differs from the first send:\n%s\n%s", sent[0], sent[1])
				}
			} else if err == nil || len(sent) != 1 {
				t.Errorf("got %v after %d sends, want the error after one send", err, len(sent))
			}
		})
	}
}
