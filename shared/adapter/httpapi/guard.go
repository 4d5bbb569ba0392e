package httpapi

import (
	"crypto/subtle"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// jsonBody checks that a request carrying a body, or naming its type, carries JSON: a browser
// sends a cross-origin text/plain or form POST without asking first, so only JSON bodies, which
// it must ask for, are served. Parameters are allowed, but a charset can only be UTF-8.
func jsonBody(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return r.ContentLength == 0
	}
	media, params, err := mime.ParseMediaType(ct)
	if err != nil || media != "application/json" {
		return false
	}
	cs, ok := params["charset"]
	return !ok || strings.EqualFold(cs, "utf-8")
}

// Guard returns h behind the checks of an API served straight to clients, as atf dev serves it
// (on AWS, API Gateway authorizes each request with IAM instead):
//   - when addr is a loopback address, a request must name a loopback host (localhost, 127.0.0.1,
//     [::1]) at addr's port, and an Origin, if sent, must be such a host too: a web page cannot
//     read the API through DNS rebinding, nor post to it from another origin (403);
//   - when token is not empty, a request must carry "Authorization: Bearer <token>" (401).
//
// Beyond loopback the Host and Origin checks cannot tell a page from a client, so a listener
// there must have a token (shared/local refuses to start without one).
func Guard(h http.Handler, addr net.Addr, token string) http.Handler {
	g := &guard{next: h, token: []byte(token)}
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		g.loopbackPort = strconv.Itoa(tcp.Port)
	}
	return g
}

type guard struct {
	next         http.Handler
	loopbackPort string // "" unless the listener is on a loopback address
	token        []byte
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.loopbackPort != "" {
		if !g.loopbackHost(r.Host) {
			writeError(w, http.StatusForbidden, "forbidden", "the Host header must name this loopback listener, such as localhost:"+g.loopbackPort)
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !g.loopbackOrigin(origin) {
			writeError(w, http.StatusForbidden, "forbidden", "requests from another origin are refused")
			return
		}
	}
	if len(g.token) > 0 {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), g.token) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeError(w, http.StatusUnauthorized, "unauthorized", "this API needs its token: Authorization: Bearer <token>")
			return
		}
	}
	g.next.ServeHTTP(w, r)
}

// loopbackHost tells whether hostport names a loopback host at the listener's port.
func (g *guard) loopbackHost(hostport string) bool {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		// No port: only right for port 80, which HTTP leaves out.
		host, port = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), "80"
	}
	if port != g.loopbackPort {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackOrigin tells whether origin is this listener's own, as a page it served would send.
func (g *guard) loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Scheme == "http" && u.Path == "" && u.User == nil && g.loopbackHost(u.Host)
}
