package lambdaruntime

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// SigV4 authorizes requests as API Gateway does for routes with IAM authorization (AWS_IAM):
// each must carry an AWS Signature Version 4 in its Authorization header, for the execute-api
// service in Region, by credentials Credentials knows, dated within MaxSkew of the clock.
// It recomputes the signature from the request as received, following AWS's description of
// the canonical request (not the SDK's signer), so that a client that signs something other than
// what it sends, or signs it wrongly, is refused.
//
// Refused requests get 403 and API Gateway's JSON messages. It does not evaluate IAM policies:
// known credentials may invoke every route.
type SigV4 struct {
	Region string
	// Credentials returns the credentials of an access key id; ok is false for an unknown one.
	// With a session token, the request must carry it (X-Amz-Security-Token), signed.
	Credentials func(accessKeyID string) (creds aws.Credentials, ok bool)
	Now         func() time.Time // the gateway's clock [time.Now]
}

// MaxSkew is how far a request's signing time may be from API Gateway's clock.
const MaxSkew = 5 * time.Minute

// sigV4Service is the service API Gateway's invocations are signed for.
const sigV4Service = "execute-api"

// Messages of API Gateway's 403 answers.
const (
	MsgMissingToken      = "Missing Authentication Token"
	MsgSignatureMismatch = "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
	MsgInvalidToken      = "The security token included in the request is invalid."
	MsgHostNotSigned     = "'Host' must be a 'SignedHeader' in the AWS Authorization."
	MsgDateNotSigned     = "'X-Amz-Date' must be a 'SignedHeader' in the AWS Authorization."
)

// StaticCredentials returns known as SigV4's Credentials.
func StaticCredentials(known ...aws.Credentials) func(string) (aws.Credentials, bool) {
	return func(id string) (aws.Credentials, bool) {
		for _, c := range known {
			if c.AccessKeyID != "" && c.AccessKeyID == id {
				return c, true
			}
		}
		return aws.Credentials{}, false
	}
}

// Handler returns next behind v: a request it refuses does not reach next.
func (v *SigV4) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 10<<20))
		if err != nil {
			gatewayError(w, http.StatusRequestEntityTooLarge, "Request Entity Too Large")
			return
		}
		if msg, ok := v.Verify(r, body); !ok {
			gatewayError(w, http.StatusForbidden, msg)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// Verify checks r's signature, with its body; when it refuses r, msg is API Gateway's message.
func (v *SigV4) Verify(r *http.Request, body []byte) (msg string, ok bool) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return MsgMissingToken, false
	}
	algorithm, fields, _ := strings.Cut(auth, " ")
	credential, signedHeaders, signature := authFields(fields)
	scope := strings.Split(credential, "/") // AKID/DATE/REGION/SERVICE/aws4_request
	if algorithm != "AWS4-HMAC-SHA256" || len(scope) != 5 || signedHeaders == "" || signature == "" || scope[4] != "aws4_request" {
		// As API Gateway answers a bearer token, or a signature without its parts.
		return "Authorization header requires 'Credential' parameter. Authorization header requires 'Signature' parameter. " +
			"Authorization header requires 'SignedHeaders' parameter. Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.", false
	}
	if scope[2] != v.Region {
		return fmt.Sprintf("Credential should be scoped to a valid region. Credential=%s", credential), false
	}
	if scope[3] != sigV4Service {
		return fmt.Sprintf("Credential should be scoped to correct service: '%s'.", sigV4Service), false
	}
	amzDate := r.Header.Get("X-Amz-Date")
	signedAt, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil {
		return "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.", false
	}
	if scope[1] != amzDate[:8] {
		return fmt.Sprintf("Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '%s' != '%s', from '%s'.", scope[1], amzDate[:8], amzDate), false
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	at := now().UTC()
	const stamp = "20060102T150405Z"
	if signedAt.Before(at.Add(-MaxSkew)) {
		return fmt.Sprintf("Signature expired: %s is now earlier than %s (%s - 5 min.)", amzDate, at.Add(-MaxSkew).Format(stamp), at.Format(stamp)), false
	}
	if signedAt.After(at.Add(MaxSkew)) {
		return fmt.Sprintf("Signature not yet current: %s is still later than %s (%s + 5 min.)", amzDate, at.Add(MaxSkew).Format(stamp), at.Format(stamp)), false
	}
	creds, known := v.Credentials(scope[0])
	if !known {
		return MsgInvalidToken, false
	}
	names := strings.Split(signedHeaders, ";")
	// The date must be signed too: else a captured signature could be sent again under a new
	// X-Amz-Date, past the skew.
	for _, must := range []struct{ name, msg string }{{"host", MsgHostNotSigned}, {"x-amz-date", MsgDateNotSigned}} {
		if !slices.Contains(names, must.name) {
			return must.msg, false
		}
	}
	token, hasToken := r.Header["X-Amz-Security-Token"]
	switch {
	case creds.SessionToken != "" && (!hasToken || token[0] != creds.SessionToken || !slices.Contains(names, "x-amz-security-token")):
		return MsgInvalidToken, false
	case creds.SessionToken == "" && hasToken: // a token with long-term keys, which have none
		return MsgInvalidToken, false
	}
	canonical := strings.Join([]string{
		r.Method,
		canonicalURI(r.URL.EscapedPath()),
		canonicalQuery(r.URL.RawQuery),
		canonicalHeaders(r, names),
		signedHeaders,
		hexSHA256(body),
	}, "\n")
	credentialScope := strings.Join(scope[1:], "/")
	toSign := strings.Join([]string{"AWS4-HMAC-SHA256", amzDate, credentialScope, hexSHA256([]byte(canonical))}, "\n")
	key := []byte("AWS4" + creds.SecretAccessKey)
	for _, part := range scope[1:] {
		key = hmacSHA256(key, part)
	}
	want := hex.EncodeToString(hmacSHA256(key, toSign))
	if !hmac.Equal([]byte(want), []byte(signature)) {
		return MsgSignatureMismatch, false
	}
	return "", true
}

// authFields reads "Credential=..., SignedHeaders=..., Signature=..." (commas, spaces optional).
func authFields(s string) (credential, signedHeaders, signature string) {
	for _, f := range strings.Split(s, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(f), "=")
		switch k {
		case "Credential":
			credential = val
		case "SignedHeaders":
			signedHeaders = val
		case "Signature":
			signature = val
		}
	}
	return credential, signedHeaders, signature
}

// canonicalURI is the path as sent (still percent-encoded), each segment URI-encoded once more:
// every service but S3 encodes the path twice.
func canonicalURI(escapedPath string) string {
	if escapedPath == "" {
		return "/"
	}
	segs := strings.Split(escapedPath, "/")
	for i, s := range segs {
		segs[i] = uriEncode(s)
	}
	return strings.Join(segs, "/")
}

// canonicalQuery is the query's parameters, decoded and URI-encoded again, sorted by name then
// value, name=value joined with &.
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	var pairs [][2]string
	for _, p := range strings.Split(raw, "&") {
		if p == "" {
			continue
		}
		k, val, _ := strings.Cut(p, "=")
		dk, err1 := url.QueryUnescape(k)
		dv, err2 := url.QueryUnescape(val)
		if err1 != nil || err2 != nil {
			dk, dv = k, val
		}
		pairs = append(pairs, [2]string{uriEncode(dk), uriEncode(dv)})
	}
	slices.SortFunc(pairs, func(a, b [2]string) int { return slices.Compare(a[:], b[:]) })
	joined := make([]string, len(pairs))
	for i, p := range pairs {
		joined[i] = p[0] + "=" + p[1]
	}
	return strings.Join(joined, "&")
}

// canonicalHeaders is each signed header, lower case, with its values trimmed, inner runs of
// spaces made one, and joined by commas; a line each, in SignedHeaders' order, each ending in \n.
func canonicalHeaders(r *http.Request, names []string) string {
	var b strings.Builder
	for _, name := range names {
		var values []string
		switch name {
		case "host": // net/http moves it out of the header map
			values = []string{r.Host}
		case "content-length":
			values = []string{strconv.FormatInt(r.ContentLength, 10)}
		default:
			values = slices.Clone(r.Header.Values(name))
		}
		for i, val := range values {
			values[i] = strings.Join(strings.Fields(val), " ")
		}
		b.WriteString(name + ":" + strings.Join(values, ",") + "\n")
	}
	return b.String()
}

// uriEncode percent-encodes every byte but the unreserved characters (A-Z a-z 0-9 - . _ ~), in
// upper-case hex, as SigV4 asks.
func uriEncode(s string) string {
	var b strings.Builder
	for i := range len(s) {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func hexSHA256(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}
