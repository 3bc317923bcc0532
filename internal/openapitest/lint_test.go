package openapitest_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"gopkg.in/yaml.v3"
)

const specPath = "../../docs/openapi.yaml"

// TestSpecPassesIndependentValidator checks docs/openapi.yaml with
// pb33f's libopenapi-validator, which holds a document to the official
// OpenAPI 3.0 JSON Schema. It shares no code with kin-openapi, which the
// REST tests check exchanges with: a fault kin-openapi tolerates (it is
// lenient where generators are not) still fails here.
func TestSpecPassesIndependentValidator(t *testing.T) {
	spec, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		t.Fatalf("libopenapi cannot read the document: %v", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("libopenapi-validator cannot build a validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("line %d: %s: %s", e.SpecLine, e.Message, e.Reason)
			for _, f := range e.SchemaValidationErrors {
				t.Errorf("  line %d: %s: %s", f.Line, f.FieldPath, f.Reason)
			}
		}
	}
}

// TestSpecLint holds every schema and operation of docs/openapi.yaml,
// found by walking the document (so operations added later are held to
// it too), to the rules that client generators need and the OpenAPI
// schema does not enforce.
func TestSpecLint(t *testing.T) {
	spec, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(spec, &root); err != nil {
		t.Fatal(err)
	}
	doc := root.Content[0]
	var faults []string
	fault := func(n *yaml.Node, format string, args ...any) {
		faults = append(faults, fmt.Sprintf("line %d: %s", n.Line, fmt.Sprintf(format, args...)))
	}
	lintInfo(doc, fault)
	walkSchemas(doc, func(n *yaml.Node) {
		_, hasType := get(n, "type")
		if v, ok := get(n, "nullable"); ok && v.Value == "true" && !hasType {
			// OpenAPI 3.0: nullable has no effect without a type; generators drop it.
			fault(n, "nullable without type")
		}
		if t, ok := get(n, "type"); ok && t.Value == "object" {
			if !hasAny(n, "properties", "additionalProperties", "oneOf", "allOf", "anyOf") {
				// Left unsaid, generators differ: TypeScript ones make it Record<string, never>.
				fault(n, "an object with no properties must say additionalProperties: true (free-form) or false (empty)")
			}
		}
		if one, ok := get(n, "oneOf"); ok && allRefs(one) {
			if _, ok := get(n, "discriminator"); !ok {
				fault(n, "oneOf of schemas without a discriminator: its branches may overlap")
			}
		}
	})
	forEachOperation(doc, func(route string, op *yaml.Node) {
		if id, ok := get(op, "operationId"); !ok || id.Value == "" {
			fault(op, "%s has no operationId", route)
		}
		responses, _ := get(op, "responses")
		has4xx := false
		for _, code := range keys(responses) {
			has4xx = has4xx || strings.HasPrefix(code, "4")
		}
		if !has4xx {
			fault(op, "%s documents no 4xx response", route)
		}
		rb, _ := get(op, "requestBody")
		if ref, ok := get(rb, "$ref"); ok {
			rb, _ = path(doc, "components", "requestBodies", strings.TrimPrefix(ref.Value, "#/components/requestBodies/"))
		}
		if body, ok := path(rb, "content", "application/json", "schema"); ok {
			checkClosed(body, route+" request body", fault)
		}
	})
	if servers, ok := get(doc, "servers"); ok {
		for _, s := range servers.Content {
			if u, ok := get(s, "url"); ok && strings.Contains(u.Value, "{") {
				fault(u, "server URL %s has a variable: generators and tools that try it need a plain URL", u.Value)
			}
		}
	}
	for _, f := range faults {
		t.Error(f)
	}
}

// checkClosed holds a request body's objects to the server's strictness:
// every object with properties says additionalProperties: false, since the
// server refuses a field it does not take (docs/api.md, "Conventions").
func checkClosed(n *yaml.Node, where string, fault func(*yaml.Node, string, ...any)) {
	if n.Kind != yaml.MappingNode {
		return
	}
	if props, ok := get(n, "properties"); ok {
		ap, ok := get(n, "additionalProperties")
		if !ok || ap.Value != "false" {
			fault(n, "%s: an object with properties must say additionalProperties: false (the server refuses other fields)", where)
		}
		for i := 0; i+1 < len(props.Content); i += 2 {
			checkClosed(props.Content[i+1], where+"."+props.Content[i].Value, fault)
		}
	}
	if items, ok := get(n, "items"); ok {
		checkClosed(items, where+"[]", fault)
	}
}

// walkSchemas calls f for every mapping under components/schemas and under
// each schema key of the paths: every schema object, nested ones too.
func walkSchemas(doc *yaml.Node, f func(*yaml.Node)) {
	var walk func(n *yaml.Node, inSchema bool)
	walk = func(n *yaml.Node, inSchema bool) {
		switch n.Kind {
		case yaml.MappingNode:
			if inSchema {
				f(n)
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i].Value, n.Content[i+1]
				switch {
				case k == "example" || k == "examples":
					continue
				case k == "schema" || k == "schemas" && !inSchema:
					walk(v, true)
				case inSchema && (k == "properties" || k == "schemas" || k == "mapping"):
					for j := 0; j+1 < len(v.Content); j += 2 {
						if k != "mapping" {
							walk(v.Content[j+1], true)
						}
					}
				default:
					walk(v, inSchema)
				}
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, inSchema)
			}
		}
	}
	walk(doc, false)
}

// forEachOperation calls f for every operation of the document's paths.
func forEachOperation(doc *yaml.Node, f func(route string, op *yaml.Node)) {
	paths, _ := get(doc, "paths")
	for i := 0; paths != nil && i+1 < len(paths.Content); i += 2 {
		item := paths.Content[i+1]
		for j := 0; j+1 < len(item.Content); j += 2 {
			method := item.Content[j].Value
			if slices.Contains([]string{"get", "put", "post", "delete", "patch", "head", "options"}, method) {
				f(strings.ToUpper(method)+" "+paths.Content[i].Value, item.Content[j+1])
			}
		}
	}
}

func get(n *yaml.Node, key string) (*yaml.Node, bool) {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1], true
		}
	}
	return nil, false
}

func path(n *yaml.Node, keys ...string) (*yaml.Node, bool) {
	for _, k := range keys {
		var ok bool
		if n, ok = get(n, k); !ok {
			return nil, false
		}
	}
	return n, true
}

func hasAny(n *yaml.Node, keys ...string) bool {
	for _, k := range keys {
		if _, ok := get(n, k); ok {
			return true
		}
	}
	return false
}

func keys(n *yaml.Node) []string {
	var out []string
	for i := 0; n != nil && i+1 < len(n.Content); i += 2 {
		out = append(out, n.Content[i].Value)
	}
	return out
}

// allRefs reports whether every branch of a oneOf is a $ref to a schema
// (objects, which a discriminator tells apart), not inline scalars.
func allRefs(seq *yaml.Node) bool {
	for _, b := range seq.Content {
		if _, ok := get(b, "$ref"); !ok {
			return false
		}
	}
	return len(seq.Content) > 0
}

// lintInfo checks the document's info: generated clients and API
// catalogues show its license.
func lintInfo(doc *yaml.Node, fault func(*yaml.Node, string, ...any)) {
	info, ok := get(doc, "info")
	if !ok {
		fault(doc, "no info")
		return
	}
	lic, ok := get(info, "license")
	if !ok {
		fault(info, "info has no license: generated clients and catalogues show it")
		return
	}
	if name, ok := get(lic, "name"); !ok || name.Value == "" {
		fault(lic, "the license has no name")
	}
}
