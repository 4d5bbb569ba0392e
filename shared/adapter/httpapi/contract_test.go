package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	"github.com/pb33f/libopenapi-validator/content"
	liberrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/store/sqlitestore"
)

type liberror = liberrors.ValidationError

// The contract, parsed once for every test of the package.
var contract struct {
	once  sync.Once
	model *v3.Document
	v     validator.Validator
	err   error
}

func loadContract(t testing.TB) (*v3.Document, validator.Validator) {
	t.Helper()
	contract.once.Do(func() {
		doc, err := libopenapi.NewDocument(httpapi.OpenAPI())
		if err != nil {
			contract.err = err
			return
		}
		if !strings.HasPrefix(doc.GetVersion(), "3.1") {
			contract.err = fmt.Errorf("the contract is OpenAPI %s, want 3.1", doc.GetVersion())
			return
		}
		m, err := doc.BuildV3Model()
		if err != nil {
			contract.err = err
			return
		}
		contract.model = &m.Model
		v, errs := validator.NewValidator(doc, config.WithBodyDecoder("application/json", content.DecoderFunc(decodeJSON)))
		if len(errs) > 0 {
			contract.err = fmt.Errorf("the contract: %v", errs)
			return
		}
		contract.v = v
		if ok, errs := contract.v.ValidateDocument(); !ok {
			contract.err = fmt.Errorf("the contract is not valid OpenAPI: %v", errs)
		}
	})
	if contract.err != nil {
		t.Fatal(contract.err)
	}
	return contract.model, contract.v
}

// decodeJSON decodes a body for the validator. Payloads and results are any JSON, and JSON
// numbers have no range: the validator's own decoder fails on a number past float64, such as
// 1e400, which a payload may hold. Where such a number stands the contract allows any value, so it
// is validated as the largest float64 of its sign.
func decodeJSON(in *content.DecodeInput) (any, error) {
	dec := json.NewDecoder(in.Body)
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if err == io.EOF {
			return nil, nil
		}
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return numbersAsFloats(v), nil
}

func numbersAsFloats(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = numbersAsFloats(e)
		}
	case []any:
		for i, e := range v {
			v[i] = numbersAsFloats(e)
		}
	case json.Number:
		f, err := v.Float64()
		if err != nil { // out of range: f is ±Inf
			return math.Copysign(math.MaxFloat64, f)
		}
		return f
	}
	return v
}

// checked returns h with every answer held against the contract: an answer to a route of the
// contract is one of the operation's responses, its body of the response's schema; any other
// answer is an Error, 404 or 405 no_route. A mismatch fails t.
func checked(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	loadContract(t)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		checkContract(t, r, rec.Result())
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
}

// checkContract holds one answer against the contract.
func checkContract(t testing.TB, r *http.Request, resp *http.Response) {
	t.Helper()
	model, v := loadContract(t)
	body, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if resp.StatusCode == 499 && r.Context().Err() != nil {
		return // the client went away: nobody reads the answer
	}
	ok, errs := v.ValidateHttpResponse(r, resp)
	if ok {
		return
	}
	if !slices.ContainsFunc(errs, func(e *liberror) bool { return e.IsPathMissingError() || e.IsOperationMissingError() }) {
		t.Errorf("%s %.80s: answer %d %.300s breaks the contract: %s", r.Method, r.URL.RequestURI(), resp.StatusCode, body, describe(errs))
		return
	}
	// No operation of the contract: the answer must be the API's own no_route, or a guard's.
	errorSchema := model.Components.Schemas.GetOrZero("Error").Schema()
	if ok, serrs := schema_validation.NewSchemaValidator().ValidateSchemaBytes(errorSchema, body); !ok {
		t.Errorf("%s %.80s: answer %d %.300s is no Error: %s", r.Method, r.URL.RequestURI(), resp.StatusCode, body, describe(serrs))
		return
	}
	var e struct{ Error struct{ Code string } }
	_ = json.Unmarshal(body, &e)
	switch {
	case (resp.StatusCode == 404 || resp.StatusCode == 405) && e.Error.Code == "no_route":
	case resp.StatusCode == 415 && e.Error.Code == "unsupported_media_type":
	default:
		t.Errorf("%s %.80s: answer %d %s to a request the contract has no operation for", r.Method, r.URL.RequestURI(), resp.StatusCode, body)
	}
}

func describe(errs []*liberror) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  %s: %s", e.Message, e.Reason)
		for _, s := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n    %s at %s", s.Reason, s.FieldPath)
		}
	}
	return b.String()
}

// TestContractRoutes: every route the API serves is an operation of the contract, and every
// operation of the contract a route of the API.
func TestContractRoutes(t *testing.T) {
	model, _ := loadContract(t)
	store, err := sqlitestore.Open(t.TempDir() + "/atf.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	served := httpapi.Patterns(httpapi.New(frontend.New(store, frontend.Config{}), nil))
	var documented []string
	for path, item := range model.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(served)
	slices.Sort(documented)
	for _, p := range served {
		if !slices.Contains(documented, p) {
			t.Errorf("route %s is not in the contract", p)
		}
	}
	for _, p := range documented {
		if !slices.Contains(served, p) {
			t.Errorf("the contract's %s is no route of the API", p)
		}
	}
	if len(served) == 0 {
		t.Fatal("the API serves no route")
	}
}

// TestContractServed: GET /v1/openapi.json answers the contract, as embedded.
func TestContractServed(t *testing.T) {
	h, _ := newHandler(t)
	rec := serve(h, "GET", "/v1/openapi.json", nil)
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" || !bytes.Equal(rec.Body.Bytes(), httpapi.OpenAPI()) {
		t.Fatalf("GET /v1/openapi.json: %d %q %.100s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
}
