// Package dashboard is the operators' web dashboard of atf dev: static files (a small Preact app,
// vendored, no build step) embedded in the binary, which call the v1 API from the browser, and
// Activity, the last hour of deliveries and outcomes that its charts draw.
//
// The static files hold no data, so they are served without the API's token; every figure the
// page shows comes from the API, which asks for it (the page keeps the token in sessionStorage).
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Static serves the dashboard's files: index.html at "/", the rest by their names.
func Static() http.Handler {
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree always has it
	}
	fileServer := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		// Scripts and styles of this origin only, no inline code, no framing: what the page shows
		// comes from the API's JSON, rendered as text by Preact, never as markup.
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache") // the binary's files change with the binary
		fileServer.ServeHTTP(w, r)
	})
}
