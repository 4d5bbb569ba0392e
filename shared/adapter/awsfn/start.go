package awsfn

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
)

// EnvInvoke names an event file: when it is set, Start runs the handler once on that event and
// prints the response, instead of serving the Lambda runtime. `make invoke` uses it, so a local
// run goes through the real main, the real handler and the runtime's own JSON decoding.
const EnvInvoke = "ATF_INVOKE"

// The deadline of an invocation through ATF_INVOKE, as a function's timeout would be: the
// consumer, for one, sweeps until shortly before it. ATF_INVOKE_TIMEOUT (a Go duration) sets it.
const (
	EnvInvokeTimeout     = "ATF_INVOKE_TIMEOUT"
	DefaultInvokeTimeout = 30 * time.Second
)

// Start serves handler (any handler lambda.Start takes), or invokes it once on the event file
// named by ATF_INVOKE and exits. Each of after runs at the end of every invocation, before the
// answer goes back (and AWS Lambda freezes the process): Clients.Invoked, for one.
func Start(handler any, after ...func()) {
	h := afterEach(lambda.NewHandler(handler), after)
	path := os.Getenv(EnvInvoke)
	if path == "" {
		lambda.Start(h)
		return
	}
	timeout := DefaultInvokeTimeout
	if v := os.Getenv(EnvInvokeTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			fmt.Fprintf(os.Stderr, "%s=%q: want a positive Go duration\n", EnvInvokeTimeout, v)
			os.Exit(2)
		}
		timeout = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := Invoke(ctx, h, path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}

// afterEach returns h running each of after at the end of every invocation.
func afterEach(h lambda.Handler, after []func()) lambda.Handler {
	if len(after) == 0 {
		return h
	}
	return invokeFunc(func(ctx context.Context, payload []byte) ([]byte, error) {
		out, err := h.Invoke(ctx, payload)
		for _, f := range after {
			f()
		}
		return out, err
	})
}

// invokeFunc is a lambda.Handler of a function.
type invokeFunc func(ctx context.Context, payload []byte) ([]byte, error)

func (f invokeFunc) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	return f(ctx, payload)
}

// Invoke runs handler once on the event in the file at path and returns its response, indented.
func Invoke(ctx context.Context, handler any, path string) ([]byte, error) {
	event, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out, err := lambda.NewHandler(handler).Invoke(ctx, event)
	if err != nil {
		return nil, fmt.Errorf("%s: the handler failed: %w", path, err)
	}
	var v any
	if json.Unmarshal(out, &v) == nil {
		if pretty, err := json.MarshalIndent(v, "", "  "); err == nil {
			return pretty, nil
		}
	}
	return out, nil
}

// Setup is the start of every function's main: it reads the environment, builds the logger and
// the clients, and ends the process with the reason if any of that fails (a cold start cannot
// recover; the error reaches the function's log).
func Setup() (Env, Clients, *slog.Logger) {
	env, err := LoadEnv()
	if err != nil {
		log.Fatal(err)
	}
	logger := Logger()
	clients, err := Open(context.Background(), env, logger)
	if err != nil {
		log.Fatal(err)
	}
	return env, clients, logger
}
