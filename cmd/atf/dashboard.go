package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/openatf/atf/shared/adapter/dashboard"
	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/client"
)

const dashboardUsage = `  atf dashboard --endpoint https://ID.execute-api.REGION.amazonaws.com [--addr 127.0.0.1:8081]
          [--region R] [--token TOKEN]
      serve the dashboard of a deployed API on this machine: its calls go to the endpoint signed
      with your AWS credentials (as the client commands sign); the charts need atf dev.
      Without --token or $ATF_TOKEN it makes a token and prints it: the page asks for it
`

// dashboardCommand serves the dashboard's files on addr, with atf dev's guards (the loopback
// Host and Origin checks, the token: given, or made and printed), and its API calls from a deployed API, signed
// (dashboard.Proxy): a browser cannot sign with SigV4, this process does it for the page.
func dashboardCommand(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("atf dashboard", flag.ContinueOnError)
	endpoint := fs.String("endpoint", os.Getenv("ATF_ENDPOINT"), "the deployed API (default $ATF_ENDPOINT)")
	addr := fs.String("addr", "127.0.0.1:8081", "listen address of the dashboard")
	region := fs.String("region", "", "the AWS region to sign requests for (default the endpoint's, else $AWS_REGION)")
	token := fs.String("token", "", "the page's API calls must carry it, as atf dev --token asks; required to listen beyond loopback (default $ATF_TOKEN, else one made and printed)")
	if pos, err := parse(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return fmt.Errorf("dashboard takes no arguments, got %q", pos)
	}
	u, err := url.Parse(strings.TrimRight(*endpoint, "/"))
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("dashboard needs --endpoint https://ID.execute-api.REGION.amazonaws.com (the ApiUrl output of the stack), got %q", *endpoint)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := sigV4Config(ctx, u.String(), *region)
	if err != nil {
		return err
	}
	if cfg == nil {
		return fmt.Errorf("%s is not an API Gateway endpoint: atf dashboard signs its calls to a deployed API (ATF_SIGV4=1 signs them to any endpoint); atf dev serves its own dashboard", u.Host)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	tok := cmp.Or(*token, os.Getenv("ATF_TOKEN"))
	if !ln.Addr().(*net.TCPAddr).IP.IsLoopback() && tok == "" {
		ln.Close()
		// Anyone who reaches the proxy calls the API with this operator's credentials.
		return fmt.Errorf("listening on %s, beyond loopback, needs a token (--token or ATF_TOKEN): the dashboard calls the API with your AWS credentials", ln.Addr())
	}
	madeToken := tok == ""
	if madeToken {
		// Every user and process of this machine reaches a loopback port: without a token, each
		// could call the API with this operator's AWS credentials.
		tok = rand.Text()
	}
	sign := func(ctx context.Context, req *http.Request, body []byte) error {
		return client.SignSigV4(ctx, cfg, req, body, time.Now())
	}
	api := httpapi.Guard(dashboard.Proxy(u, sign, nil), ln.Addr(), tok)
	static := httpapi.Guard(dashboard.Static(), ln.Addr(), "")
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1" || strings.HasPrefix(r.URL.Path, "/v1/") {
				api.ServeHTTP(w, r)
				return
			}
			static.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: dashboard.ProxyTimeout + 5*time.Second,
		IdleTimeout: time.Minute,
	}
	fmt.Fprintf(out, "dashboard of %s (signing for %s) at http://%s/\n", u, cfg.Region, ln.Addr())
	if madeToken {
		fmt.Fprintf(out, "token (the page asks for it): %s\n", tok)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
