package apifn_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/openatf/atf/shared/adapter/apifn"
	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// The bound FuzzSurface holds every answer to: at most surfaceFactor × the bytes of the requests
// sent so far (a read answers what earlier writes stored), plus surfaceOverhead, plus
// surfacePerTask for each task the answer holds (a task's own fields: times, status, counters,
// names; a batch holds at most task.MaxBatch tasks, a list page at most its limit).
const (
	surfaceFactor   = 1
	surfaceOverhead = 4 << 10
	surfacePerTask  = 512
)

// FuzzSurface drives the HTTP API as `atf dev` serves it (httpapi over the embedded store, in
// process) and through the API Gateway adapter (Handle with a proxy event), with random nesting,
// sizes, encodings, headers, paths and query values. Each input writes (a schedule, a batch or a
// gate) and then reads back what it stored (get, list, cancel, lambdas), on a lambda of its own,
// once by each way in. Every answer:
//   - is not a 5xx (nor, through the adapter, a function error, which API Gateway makes a 502);
//   - is one JSON value, valid UTF-8;
//   - is bounded by the input (see surfaceFactor).
func FuzzSurface(f *testing.F) {
	for _, s := range []struct {
		op, depth uint8
		size      uint16
		enc       uint8
		headers   string
		text      string
	}{
		{0, 1, 10, 0, "", "hello"},
		{0, task.MaxPayloadDepth, 100, 0, "", "deep"},
		{0, task.MaxPayloadDepth + 1, 10, 0, "", "too deep"},
		{0, 200, 1000, 4, "", "<>&"},                      // deep, HTML characters
		{0, task.MaxPayloadDepth, 3900, 4, "", "\u2028<"}, // about the largest payload, of characters HTML escaping grows
		{0, 3, 50, 0, "", "bad \xff\xfe bytes"},           // invalid UTF-8 in a string
		{0, 3, 50, 2, "", "unquoted"},                     // not JSON
		{0, 3, 50, 3, "", "utf-16 é"},                     // a UTF-16 body
		{0, 3, 50, 5, "", "latin-1 é"},                    // a Latin-1 body
		{1, 5, 399, 1, "", "batch"},                       // a batch of 100
		{1, 9, 60000, 1, "", "x"},                         // a batch over the payload limit
		{2, 0, 0, 0, "", "pause"},                         // a gate
		{2, 0, 0, 0, "", "\xff"},                          // a gate mode not UTF-8
		{3, 0, 0, 0, "", strings.Repeat("é\x00/%", 500)},  // path and query values
		{0, 2, 10, 0, "Content-Type: text/plain", "x"},    // headers
		{0, 2, 10, 1, "Content-Type: application/json; charset=utf-16\nOrigin: http://evil.example\nHost: evil.example", "x"},
		{0, 2, 10, 0, "Content-Encoding: gzip\nTransfer-Encoding: chunked\nX-\xff: \xff", "x"},
	} {
		f.Add(s.op, s.depth, s.size, s.enc, s.headers, s.text)
	}

	store, err := sqlitestore.Open(filepath.Join(f.TempDir(), "atf.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { store.Close() })
	// A small payload limit, so that inputs over it stay small.
	cfg := task.Config{PayloadLimit: 4 << 10}.WithDefaults()
	quiet := slog.New(slog.DiscardHandler)
	var n atomic.Int64

	f.Fuzz(func(t *testing.T, op, depth uint8, size uint16, enc uint8, headers, text string) {
		for _, gateway := range []bool{false, true} {
			lambda := fmt.Sprintf("surface-%d", n.Add(1))
			svc := frontend.New(store, frontend.Config{Lambdas: task.FixedCatalog{task.Lambda{Name: lambda}.WithDefaults()}, Task: cfg})
			api := httpapi.New(svc, quiet)
			c := &surfaceClient{t: t, api: api, fn: apifn.New(api, quiet), gateway: gateway, b64: enc&8 != 0, headers: parseHeaders(headers)}
			base := "/v1/lambdas/" + lambda
			payload := nestedJSON(int(depth), enc, leaf(text, int(size), enc))
			switch op % 4 {
			case 0:
				c.do("POST", base+"/tasks", nil, encodeBody(`{"id":"t1","delay":"1h","payload":`+payload+`}`, enc))
			case 1:
				var specs []string
				for i := range 1 + int(size)%task.MaxBatch {
					specs = append(specs, fmt.Sprintf(`{"id":"t%d","delay":"1h","payload":%s}`, i+1, payload))
				}
				c.do("POST", base+"/tasks/batch", nil, encodeBody(`{"tasks":[`+strings.Join(specs, ",")+`]}`, enc))
			case 2:
				c.do("PUT", base+"/gate", nil, encodeBody(`{"mode":"`+text+`","collection":"c1"}`, enc))
			case 3:
				c.do("GET", base+"/tasks/"+text, nil, nil)
				c.do("GET", base+"/tasks", url.Values{"status": {text}, "cursor": {text}, "limit": {text}, "collection": {text}}, nil)
				c.do("PUT", "/"+text, nil, []byte(text))
			}
			c.do("GET", base+"/tasks/t1", nil, nil)
			c.do("GET", base+"/tasks", url.Values{"limit": {strconv.Itoa(task.MaxListLimit)}}, nil)
			c.do("POST", base+"/tasks/t1/cancel", nil, nil)
			c.do("GET", "/v1/lambdas", nil, nil)
		}
	})
}

// surfaceClient sends requests one way in and checks each answer against the bytes sent so far.
type surfaceClient struct {
	t       *testing.T
	api     http.Handler
	fn      *apifn.Handler
	gateway bool // through the API Gateway adapter, else straight to the handler
	b64     bool // through the adapter, send every body base64-encoded (API Gateway does for binary media types)
	headers http.Header
	sent    int
}

func (c *surfaceClient) do(method, path string, query url.Values, body []byte) {
	t := c.t
	t.Helper()
	u := &url.URL{Path: path, RawQuery: query.Encode()}
	h := c.headers.Clone()
	if h.Get("Content-Type") == "" && body != nil {
		h.Set("Content-Type", "application/json")
	}
	c.sent += len(method) + len(u.RequestURI()) + len(body)
	for k, vs := range h {
		for _, v := range vs {
			c.sent += len(k) + len(v)
		}
	}
	var status int
	var out []byte
	if c.gateway {
		status, out = c.viaGateway(method, u, h, body)
	} else {
		req := httptest.NewRequest(method, "/", bytes.NewReader(body))
		req.URL, req.RequestURI, req.Header = u, u.RequestURI(), h
		rec := httptest.NewRecorder()
		c.api.ServeHTTP(rec, req)
		status, out = rec.Code, rec.Body.Bytes()
	}
	if status >= 500 {
		t.Fatalf("%s %.80s: status %d: %.300s", method, u, status, out)
	}
	if !utf8.Valid(out) || !json.Valid(out) {
		t.Fatalf("%s %.80s: status %d with a body that is not UTF-8 JSON: %.300q", method, u, status, out)
	}
	var tasks struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	json.Unmarshal(out, &tasks)
	if bound := surfaceFactor*c.sent + surfaceOverhead + surfacePerTask*max(1, len(tasks.Tasks)); len(out) > bound {
		t.Fatalf("%s %.80s: status %d answered %d bytes, over %d for the %d bytes sent: %.300s", method, u, status, len(out), bound, c.sent, out)
	}
}

// viaGateway sends the request as API Gateway would: a proxy event whose body is base64-encoded
// when it is not UTF-8 (or when asked).
func (c *surfaceClient) viaGateway(method string, u *url.URL, h http.Header, body []byte) (int, []byte) {
	t := c.t
	t.Helper()
	req := events.APIGatewayProxyRequest{
		HTTPMethod: method, Path: u.EscapedPath(), MultiValueHeaders: h, Headers: map[string]string{},
		MultiValueQueryStringParameters: u.Query(),
		RequestContext:                  events.APIGatewayProxyRequestContext{RequestID: "r1", HTTPMethod: method, Path: u.EscapedPath()},
	}
	for k, vs := range h {
		req.Headers[k] = vs[0]
	}
	if utf8.Valid(body) && !c.b64 {
		req.Body = string(body)
	} else {
		req.Body, req.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
	}
	resp, err := c.fn.Handle(t.Context(), req)
	if err != nil {
		t.Fatalf("%s %.80s: a function error (a 502 from API Gateway): %v", method, u, err)
	}
	out := []byte(resp.Body)
	if resp.IsBase64Encoded {
		if out, err = base64.StdEncoding.DecodeString(resp.Body); err != nil {
			t.Fatalf("a body flagged base64 is not: %v", err)
		}
	}
	return resp.StatusCode, out
}

// parseHeaders reads "Name: value" lines.
func parseHeaders(s string) http.Header {
	h := http.Header{}
	for line := range strings.SplitSeq(s, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k != "" {
			h.Add(k, strings.TrimSpace(v))
		}
	}
	return h
}

// leaf is the innermost value of a payload: text repeated to size bytes, written as enc says.
func leaf(text string, size int, enc uint8) string {
	if text == "" {
		text = "x"
	}
	s := strings.Repeat(text, size/len(text)+1)[:size]
	switch enc % 8 {
	case 1:
		b, _ := json.Marshal(s) // valid, HTML escaped
		return string(b)
	case 2:
		return s // unquoted: seldom JSON
	case 4:
		return `"` + strings.Repeat("<>&\u2028", size/6) + `"` // raw characters that escaping would grow
	default:
		// Quoted by hand: bytes that are not UTF-8 stay as they are.
		var b strings.Builder
		b.WriteByte('"')
		for i := 0; i < len(s); i++ {
			switch c := s[i]; {
			case c == '"' || c == '\\':
				b.WriteString(`\` + string(c))
			case c < 0x20:
				fmt.Fprintf(&b, `\u%04x`, c)
			default:
				b.WriteByte(c)
			}
		}
		b.WriteByte('"')
		return b.String()
	}
}

// nestedJSON nests depth arrays and objects around inner, the kind alternating with enc's bits.
func nestedJSON(depth int, enc uint8, inner string) string {
	var open, close strings.Builder
	for i := range depth {
		if (int(enc)>>(i%4))&1 == 1 {
			open.WriteString(`{"k":`)
			close.WriteString(`}`)
		} else {
			open.WriteString(`[`)
			close.WriteString(`]`)
		}
	}
	c := []byte(close.String())
	for i, j := 0, len(c)-1; i < j; i, j = i+1, j-1 {
		c[i], c[j] = c[j], c[i]
	}
	return open.String() + inner + string(c)
}

// encodeBody writes body in enc's encoding: UTF-8 (as is), UTF-16 with a byte order mark, or
// Latin-1 (each character a byte, which is not UTF-8 past ASCII).
func encodeBody(body string, enc uint8) []byte {
	switch enc % 8 {
	case 3:
		u := utf16.Encode([]rune(body))
		out := binary.LittleEndian.AppendUint16(nil, 0xfeff)
		for _, r := range u {
			out = binary.LittleEndian.AppendUint16(out, r)
		}
		return out
	case 5:
		var out []byte
		for _, r := range body {
			out = append(out, byte(r))
		}
		return out
	}
	return []byte(body)
}
