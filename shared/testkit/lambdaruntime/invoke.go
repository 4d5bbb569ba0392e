package lambdaruntime

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// InvokeServer serves the Lambda Invoke API (POST /2015-03-31/functions/{name}/invocations) for
// the Functions added to it, so that a function that invokes another through the AWS SDK, as a
// worker invokes its status function, reaches the other's binary: point the caller's
// AWS_ENDPOINT_URL_LAMBDA at URL. Requests are not authenticated.
//
// It answers as Lambda does: 200 with the function's response; 200 with X-Amz-Function-Error:
// Unhandled and the error payload when the function failed; 202 for an asynchronous (Event)
// invocation, run in the background; 204 for DryRun; 404 ResourceNotFoundException for a
// function it does not have. An invocation runs to its function's timeout even if the caller
// gives up first, as on Lambda.
type InvokeServer struct {
	URL string

	srv   *httptest.Server
	mu    sync.Mutex
	funcs map[string]*Function
	async sync.WaitGroup
	bg    context.Context
	stop  context.CancelFunc
}

// NewInvokeServer starts an Invoke API server; Close stops it.
func NewInvokeServer() *InvokeServer {
	s := &InvokeServer{funcs: map[string]*Function{}}
	s.bg, s.stop = context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("POST /2015-03-31/functions/{name}/invocations", s.serveInvoke)
	s.srv = httptest.NewServer(mux)
	s.URL = s.srv.URL
	return s
}

// Add makes f invocable by its name and ARN.
func (s *InvokeServer) Add(f *Function) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.funcs[f.name()] = f
}

// Close stops the server after the asynchronous invocations under way end (they are cut short).
func (s *InvokeServer) Close() {
	s.stop()
	s.async.Wait()
	s.srv.Close()
}

// functionName is the function a request names: a name, a partial or full ARN, with or
// without a qualifier ($LATEST is the only version here).
func functionName(ref string) string {
	if i := strings.LastIndex(ref, "function:"); i >= 0 {
		ref = ref[i+len("function:"):]
	}
	name, _, _ := strings.Cut(ref, ":")
	return name
}

func (s *InvokeServer) serveInvoke(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	f := s.funcs[functionName(r.PathValue("name"))]
	s.mu.Unlock()
	if f == nil {
		writeLambdaError(w, http.StatusNotFound, "ResourceNotFoundException", "Function not found: "+r.PathValue("name"))
		return
	}
	if q := r.URL.Query().Get("Qualifier"); q != "" && q != "$LATEST" {
		writeLambdaError(w, http.StatusNotFound, "ResourceNotFoundException", "Function not found: "+f.ARN()+":"+q)
		return
	}
	payload, err := io.ReadAll(io.LimitReader(r.Body, MaxResponseBytes+1))
	if err != nil || len(payload) > MaxResponseBytes {
		writeLambdaError(w, http.StatusRequestEntityTooLarge, "RequestTooLargeException", "Request must be smaller than 6291456 bytes for the InvokeFunction operation")
		return
	}
	if len(payload) == 0 {
		payload = []byte("{}") // as Lambda passes an empty payload
	}
	if !json.Valid(payload) {
		writeLambdaError(w, http.StatusBadRequest, "InvalidRequestContentException", "Could not parse request body into json")
		return
	}
	switch typ := r.Header.Get("X-Amz-Invocation-Type"); typ {
	case "DryRun":
		w.WriteHeader(http.StatusNoContent)
		return
	case "Event":
		s.async.Add(1)
		go func() {
			defer s.async.Done()
			_, _, _ = f.Invoke(s.bg, payload, time.Time{})
		}()
		w.WriteHeader(http.StatusAccepted)
		return
	case "", "RequestResponse":
	default:
		writeLambdaError(w, http.StatusBadRequest, "InvalidParameterValueException", "invalid invocation type "+typ)
		return
	}
	// The invocation does not end with the caller's request: Lambda runs it to the end.
	out, ferr, err := f.Invoke(context.WithoutCancel(r.Context()), payload, time.Time{})
	if err != nil {
		writeLambdaError(w, http.StatusInternalServerError, "ServiceException", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amz-Executed-Version", "$LATEST")
	w.Header().Set("X-Amzn-Requestid", newRequestID())
	if ferr != nil {
		w.Header().Set("X-Amz-Function-Error", "Unhandled")
		out = ferr.Payload
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

// writeLambdaError answers an error of the Lambda API as the SDK reads it (restjson1).
func writeLambdaError(w http.ResponseWriter, code int, typ, msg string) {
	body, _ := json.Marshal(map[string]string{"Type": "User", "message": msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-Errortype", typ)
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
