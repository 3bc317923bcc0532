package devmsg_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

// architectureDoc holds the rulebook: its first json block after the
// heading "## The rulebook" is what this test checks, so the document and
// the test cannot say different things.
const architectureDoc = "docs/architecture.md"

// rulebook is the JSON block of docs/architecture.md.
type rulebook struct {
	Module     string              `json:"module"`
	Parts      map[string][]string `json:"parts"`
	Arrows     [][2]string         `json:"arrows"`
	Never      []neverRule         `json:"never"`
	StdlibOnly []string            `json:"stdlib_only"`
}

// neverRule forbids every arrow from a part of From to a part of To. "*"
// on either side stands for every part but the other side's own and those
// in Except. Tests extends the rule to the imports of _test.go files.
type neverRule struct {
	From   []string `json:"from"`
	To     []string `json:"to"`
	Except []string `json:"except"`
	Tests  bool     `json:"tests"`
	Why    string   `json:"why"`
}

// listedPackage is the part of `go list -json` this test reads.
type listedPackage struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Error        *struct{ Err string }
}

// TestArchitecture fails, naming the package and the import, when the code
// has an arrow that docs/architecture.md forbids or does not draw, or a
// package that is on no part of it.
func TestArchitecture(t *testing.T) {
	rb := readRulebook(t)
	checkRulebook(t, rb)
	for _, p := range listPackages(t) {
		from := rb.partOf(p.ImportPath)
		if from == "" {
			t.Errorf("package %s is on no part of %s: add it to the part it belongs to", p.ImportPath, architectureDoc)
			continue
		}
		for _, imp := range p.Imports {
			if rb.outsideProject(imp) {
				if slices.Contains(rb.StdlibOnly, from) && !isStdlib(imp) {
					t.Errorf("%s imports %s: part %q imports the standard library only (%s)", p.ImportPath, imp, from, architectureDoc)
				}
				continue
			}
			rb.checkArrow(t, p.ImportPath, from, imp, false)
		}
		for _, imp := range append(slices.Clone(p.TestImports), p.XTestImports...) {
			if imp == p.ImportPath || rb.outsideProject(imp) {
				continue
			}
			rb.checkArrow(t, p.ImportPath+" (test)", from, imp, true)
		}
	}
}

// checkArrow reports the import of imp by pkg, a package of part from,
// when a never rule forbids it or, for shipping code, when no arrow allows
// it. An import within one part needs no arrow.
func (rb *rulebook) checkArrow(t *testing.T, pkg, from, imp string, test bool) {
	t.Helper()
	to := rb.partOf(imp)
	if to == "" {
		t.Errorf("%s imports %s, which is on no part of %s", pkg, imp, architectureDoc)
		return
	}
	for _, r := range rb.Never {
		if (r.Tests || !test) && r.forbids(from, to) {
			t.Errorf("forbidden import: %s imports %s (never %s -> %s: %s)", pkg, imp, from, to, r.Why)
			return
		}
	}
	if !test && from != to && !rb.allows(from, to) {
		t.Errorf("undrawn import: %s imports %s, but %s has no arrow %s -> %s (draw it there, with its reason, if it belongs)", pkg, imp, architectureDoc, from, to)
	}
}

func (r neverRule) forbids(from, to string) bool {
	side := func(names []string, part, other string) bool {
		for _, n := range names {
			if n == part || n == "*" && part != other && !slices.Contains(r.Except, part) {
				return true
			}
		}
		return false
	}
	return side(r.From, from, to) && side(r.To, to, from)
}

func (rb *rulebook) allows(from, to string) bool {
	for _, a := range rb.Arrows {
		if a[0] == from && (a[1] == to || a[1] == "*") {
			return true
		}
	}
	return false
}

// partOf returns the part whose pattern matches pkg most closely, or "".
// A pattern "dir/..." matches dir and everything under it; any other
// pattern matches that one package; "." is the module root.
func (rb *rulebook) partOf(pkg string) string {
	rel, ok := strings.CutPrefix(pkg, rb.Module)
	if !ok {
		return ""
	}
	rel = strings.TrimPrefix(rel, "/")
	if rel == "" {
		rel = "."
	}
	best, bestLen := "", -1
	for part, patterns := range rb.Parts {
		for _, pat := range patterns {
			n := -1
			if dir, ok := strings.CutSuffix(pat, "/..."); ok {
				if rel == dir || strings.HasPrefix(rel, dir+"/") {
					n = len(dir)
				}
			} else if rel == pat {
				n = len(pat) + 1 // an exact pattern beats a tree of the same folder
			}
			if n > bestLen {
				best, bestLen = part, n
			}
		}
	}
	return best
}

func (rb *rulebook) outsideProject(imp string) bool {
	return imp != rb.Module && !strings.HasPrefix(imp, rb.Module+"/")
}

// isStdlib reports whether imp is a standard library package: its first
// path element has no dot (C is cgo's pseudo-package).
func isStdlib(imp string) bool {
	first, _, _ := strings.Cut(imp, "/")
	return !strings.Contains(first, ".")
}

// checkRulebook fails for a rulebook that names a part it does not define,
// or allows an arrow it also forbids.
func checkRulebook(t *testing.T, rb *rulebook) {
	t.Helper()
	known := func(where, name string) {
		if _, ok := rb.Parts[name]; !ok && name != "*" {
			t.Errorf("%s: %s names part %q, which is not among its parts", architectureDoc, where, name)
		}
	}
	for _, a := range rb.Arrows {
		known("arrows", a[0])
		known("arrows", a[1])
		if a[1] == "*" {
			continue
		}
		for _, r := range rb.Never {
			if r.forbids(a[0], a[1]) {
				t.Errorf("%s: arrow %s -> %s is allowed and forbidden (%s)", architectureDoc, a[0], a[1], r.Why)
			}
		}
	}
	for _, r := range rb.Never {
		for _, n := range slices.Concat(r.From, r.To, r.Except) {
			known("never", n)
		}
		if r.Why == "" {
			t.Errorf("%s: a never rule from %v to %v gives no reason", architectureDoc, r.From, r.To)
		}
	}
	for _, n := range rb.StdlibOnly {
		known("stdlib_only", n)
	}
}

func readRulebook(t *testing.T) *rulebook {
	t.Helper()
	doc, err := os.ReadFile(architectureDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "\n## The rulebook\n")
	if !ok {
		t.Fatalf("%s has no heading \"## The rulebook\"", architectureDoc)
	}
	_, after, ok = strings.Cut(after, "\n```json\n")
	if !ok {
		t.Fatalf("%s has no json block after \"## The rulebook\"", architectureDoc)
	}
	block, _, ok := strings.Cut(after, "\n```\n")
	if !ok {
		t.Fatalf("%s: the rulebook's json block is not closed", architectureDoc)
	}
	var rb rulebook
	dec := json.NewDecoder(strings.NewReader(block))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rb); err != nil {
		t.Fatalf("%s: rulebook: %v", architectureDoc, err)
	}
	if rb.Module == "" || len(rb.Parts) == 0 {
		t.Fatalf("%s: the rulebook names no module or no parts", architectureDoc)
	}
	return &rb
}

// listPackages runs `go list -json ./...`. The go command is looked up on
// PATH, where go test puts the bin directory of its own GOROOT first, so
// the list is made by the toolchain running this test (runtime.GOROOT is
// deprecated for this).
func listPackages(t *testing.T) []listedPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,TestImports,XTestImports,Error", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no packages")
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].ImportPath < pkgs[j].ImportPath })
	return pkgs
}
