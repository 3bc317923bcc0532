package openapitest_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/devmsg/devmsg/internal/openapitest"
)

// oapiCodegen is the generator a Go team would run on docs/openapi.yaml,
// and runtime the package its client code imports; both come through the
// Go module proxy.
const (
	oapiCodegen = "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2"
	oapiRuntime = "github.com/oapi-codegen/runtime@v1.9.0"
)

// TestGeneratedClientTakesEveryRequestBody generates a Go client from
// docs/openapi.yaml with oapi-codegen, in a module of its own, and
// compiles (go vet) a program that uses it typed: for every operation the
// document gives a JSON request body (found by walking it, so operations
// added later are covered), it names the client's method, decodes the
// operation's example into the generated body type refusing any field the
// type lacks, and checks that the type writes the example back unchanged.
// A free-form object generated as an empty struct, a union the generator
// cannot hold, or a body with no example fails here.
func TestGeneratedClientTakesEveryRequestBody(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: generating and building a client takes a minute")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	spec, err := filepath.Abs(specPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := openapitest.Load(t, specPath).Doc()
	var checks strings.Builder
	ops := 0
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.RequestBody == nil || op.RequestBody.Value.Content.Get("application/json") == nil {
				continue
			}
			media := op.RequestBody.Value.Content.Get("application/json")
			if media.Example == nil {
				t.Errorf("%s %s: the request body has no example to check the generated type with", method, path)
				continue
			}
			example, err := json.Marshal(media.Example)
			if err != nil {
				t.Fatal(err)
			}
			name := goName(op.OperationID)
			fmt.Fprintf(&checks, "\t_ = (*client.Client).%s\n", name)
			fmt.Fprintf(&checks, "\tcheck(%q, %s, new(client.%sJSONRequestBody))\n", method+" "+path, strconv.Quote(string(example)), name)
			ops++
		}
	}
	if ops == 0 {
		t.Fatal("no operation with a JSON request body")
	}

	dir := t.TempDir()
	goCmd := func(args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module clientcheck\n\ngo 1.24\n")
	goCmd("run", oapiCodegen, "-generate", "types,client", "-package", "client", "-o", "client/client.gen.go", spec)
	write("main.go", checkProgram+"\nfunc main() {\n"+checks.String()+"\tif failed {\n\t\tos.Exit(1)\n\t}\n}\n")
	goCmd("get", oapiRuntime)
	goCmd("mod", "tidy")
	goCmd("vet", "./...")
	goCmd("run", ".")
	t.Logf("a generated client takes the request body of %d operations", ops)
}

// checkProgram is the body of the program compiled against the generated
// client; main (added by the test) calls check once per operation.
const checkProgram = `package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"

	"clientcheck/client"
)

var failed bool

// check decodes example into v, a generated request body type, refusing
// fields the type does not have, and wants the same JSON back.
func check(op, example string, v any) {
	dec := json.NewDecoder(bytes.NewReader([]byte(example)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		fmt.Printf("%s: the generated body type %T cannot hold the example %s: %v\n", op, v, example, err)
		failed = true
		return
	}
	back, err := json.Marshal(v)
	if err != nil {
		fmt.Printf("%s: %T does not encode: %v\n", op, v, err)
		failed = true
		return
	}
	var want, got any
	_ = json.Unmarshal([]byte(example), &want)
	_ = json.Unmarshal(back, &got)
	if !reflect.DeepEqual(want, got) {
		fmt.Printf("%s: the generated body type %T writes\n  %s\nfor the example\n  %s\n", op, v, back, example)
		failed = true
	}
}
`

// goName is the Go name oapi-codegen gives an operationId: its first
// letter upper-cased, other separators dropped with the next letter
// upper-cased.
func goName(id string) string {
	var b strings.Builder
	up := true
	for _, r := range id {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			up = true
			continue
		}
		if up {
			r = unicode.ToUpper(r)
			up = false
		}
		b.WriteRune(r)
	}
	return b.String()
}
