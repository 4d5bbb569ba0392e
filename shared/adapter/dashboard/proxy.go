package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"github.com/openatf/atf/shared/client"
)

// ActivityPath is the charts' endpoint (Activity), which only atf dev serves: a deployed API
// keeps no such record.
const ActivityPath = "/v1/dashboard/activity"

// ProxyTimeout bounds one proxied call: API Gateway ends a request after 30 s.
const ProxyTimeout = 35 * time.Second

// maxProxyBody bounds a request body the proxy reads to sign: the API's own limit is below it.
const maxProxyBody = 10 << 20

// Sign signs a request to the deployed API, whose body is body (client.SignSigV4).
type Sign func(ctx context.Context, req *http.Request, body []byte) error

// Proxy serves the dashboard's v1 API calls from a deployed API at endpoint (atf dashboard):
// each is sent there signed by sign, with only its method, path, query, body and Content-Type
// and Accept headers, never the dashboard's own token or the browser's cookies. API Gateway's
// refusals (403) become API errors that name the IAM action and the route, which the page
// shows; ActivityPath, CostsPath, LimitsPath and KeysPath are answered 501 not_available, which
// the page shows in place of the charts, of the Lambdas page's costs and limits, and of the keys.
// It does not guard: put it behind httpapi.Guard, as atf dev's API is.
func Proxy(endpoint *url.URL, sign Sign, transport http.RoundTripper) http.Handler {
	if transport == nil {
		transport = client.NewTransport()
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(endpoint)
			in := pr.In.Header
			pr.Out.Header = http.Header{}
			for _, k := range []string{"Content-Type", "Accept"} {
				if v := in.Get(k); v != "" {
					pr.Out.Header.Set(k, v)
				}
			}
		},
		Transport: signingTransport{sign: sign, next: transport},
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode != http.StatusForbidden {
				return nil
			}
			data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if err != nil {
				return err
			}
			body := data
			if e, ok := client.GatewayRefusal(resp.StatusCode, resp.Request.Method, resp.Request.URL.Path, data); ok {
				body = errorBody(e.Code, e.Message)
				resp.Header.Set("Content-Type", "application/json")
			}
			resp.Body = io.NopCloser(bytes.NewReader(body))
			resp.ContentLength = int64(len(body))
			resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if se := (signError{}); errors.As(err, &se) {
				writeError(w, http.StatusBadGateway, "not_signed", se.Error())
				return
			}
			writeError(w, http.StatusBadGateway, "bad_gateway", fmt.Sprintf("the call to %s failed: %v", endpoint.Host, err))
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == ActivityPath {
			writeError(w, http.StatusNotImplemented, "not_available",
				"the charts are not available against a deployed API: they show what one atf dev process saw (GET "+ActivityPath+"); run atf dev for them")
			return
		}
		if r.URL.Path == CostsPath {
			writeError(w, http.StatusNotImplemented, "not_available",
				"the cost of each lambda's work is on the deployed stack's CloudWatch dashboard (USD per lambda, today), from DynamoDB's own figures; GET "+CostsPath+" prices what one atf dev process wrote")
			return
		}
		if r.URL.Path == LimitsPath || r.URL.Path == KeysPath {
			writeError(w, http.StatusNotImplemented, "not_available",
				"the limits and keys are atf dev's (GET "+r.URL.Path+"): a deployed stack's limits are in its registry, and the starts they held are StartsHeld on its CloudWatch dashboard")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), ProxyTimeout)
		defer cancel()
		rp.ServeHTTP(w, r.WithContext(ctx))
	})
}

// signingTransport signs each request, with its body, before next sends it.
type signingTransport struct {
	sign Sign
	next http.RoundTripper
}

func (t signingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(http.MaxBytesReader(nil, req.Body, maxProxyBody))
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("read the request to sign it: %w", err)
		}
		req.Body, req.ContentLength = http.NoBody, 0
		if len(body) > 0 {
			req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
	}
	if err := t.sign(req.Context(), req, body); err != nil {
		return nil, signError{err}
	}
	return t.next.RoundTrip(req)
}

// signError is a request the proxy could not sign, such as for want of credentials.
type signError struct{ err error }

func (e signError) Error() string { return e.err.Error() }
func (e signError) Unwrap() error { return e.err }

func errorBody(code, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	return b
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(errorBody(code, msg))
}
