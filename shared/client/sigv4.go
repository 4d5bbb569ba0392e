package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// SigV4Service is the service name a request to API Gateway is signed for.
const SigV4Service = "execute-api"

// InvokeAction is the IAM action API Gateway checks for each request of an API authorized with
// IAM, as the deployed stack's routes are.
const InvokeAction = "execute-api:Invoke"

// SignSigV4 signs req, whose body is body, with AWS Signature Version 4 for API Gateway
// (SigV4Service), with cfg's credentials and region, as of now. The credentials are retrieved
// from cfg's provider for each request: the SDK's default chain caches them and refreshes them
// before they expire. Without credentials, or with expired ones, it says what to do.
func SignSigV4(ctx context.Context, cfg *aws.Config, req *http.Request, body []byte, now time.Time) error {
	if cfg.Region == "" {
		return errors.New("no AWS region to sign the request for API Gateway with: set AWS_REGION (atf: --region)")
	}
	if cfg.Credentials == nil {
		return errors.New(noCredentials)
	}
	creds, err := cfg.Credentials.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", noCredentials, err)
	}
	if creds.Expired() || creds.CanExpire && !creds.Expires.After(now) {
		return fmt.Errorf("the AWS credentials of access key %s expired at %s: refresh them (aws sso login, or new keys or session token)",
			creds.AccessKeyID, creds.Expires.UTC().Format(time.RFC3339))
	}
	sum := sha256.Sum256(body)
	return v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), SigV4Service, cfg.Region, now)
}

// notFollowing is hc, answering a redirect as it comes (a 3xx error) instead of following it:
// net/http would send a signed request's X-Amz-Security-Token and X-Amz-Date on to the new
// location, another host included, unsigned for it.
func notFollowing(hc *http.Client) *http.Client {
	nf := *hc
	nf.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &nf
}

// notSigned is the error of a request that could not be signed: it was not sent, and sending it
// again would not help (retryable).
type notSigned struct{ error }

func (e notSigned) Unwrap() error { return e.error }

const noCredentials = "no AWS credentials to sign the request for API Gateway with (" + InvokeAction + "): " +
	"set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run aws sso login"

// GatewayRefusal is the error of a 403 that API Gateway answered itself, whose body is
// {"message": "..."} (an atf error has {"error": {...}}), to a request of method on path: it names
// the IAM action and the route refused, with the gateway's message. ok is false for any other
// answer.
func GatewayRefusal(status int, method, path string, data []byte) (err *Error, ok bool) {
	var g struct {
		Message *string `json:"message"`
	}
	if status != http.StatusForbidden || json.Unmarshal(data, &g) != nil || g.Message == nil {
		return nil, false
	}
	route, _, _ := strings.Cut(path, "?")
	msg := fmt.Sprintf("API Gateway refused %s on %s %s: %s", InvokeAction, method, route, *g.Message)
	for _, h := range refusalHints {
		if strings.Contains(*g.Message, h[0]) {
			msg += " (" + h[1] + ")"
			break
		}
	}
	return &Error{Status: status, Code: "forbidden", Message: msg}, true
}

// refusalHints say what to do about API Gateway's usual refusals, by a part of the message.
var refusalHints = [][2]string{
	{"is not authorized to perform", "the caller's IAM policy must allow " + InvokeAction + " on the route's ARN"},
	{"security token included in the request is expired", "refresh the AWS credentials: aws sso login, or a new session token"},
	{"Signature expired", "the signature carries this machine's time: check its clock"},
	{"Signature not yet current", "the signature carries this machine's time: check its clock"},
	{"Missing Authentication Token", "the request was not signed: the API needs SigV4 (atf: an API Gateway URL, or ATF_SIGV4=1)"},
	{"signature we calculated does not match", "check the AWS secret access key and the region"},
}
