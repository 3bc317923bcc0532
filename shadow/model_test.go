package shadow

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/devmsg/devmsg/store"
)

func f(v float64) *float64 { return &v }
func n(v int) *int         { return &v }

func TestCheck(t *testing.T) {
	model := []store.PropertyDef{
		{Name: "i", Type: store.TypeInt, Min: f(-5), Max: f(5)},
		{Name: "d", Type: store.TypeDouble},
		{Name: "s", Type: store.TypeString, MaxLength: n(3)},
	}
	cases := []struct {
		name  string
		model []store.PropertyDef
		prop  string
		value string
		code  int
	}{
		{"int in range", model, "i", "5", CodeOK},
		{"int as 1e0", model, "i", "1e0", CodeOK},
		{"int over", model, "i", "6", CodeValueOutOfRange},
		{"int under", model, "i", "-6", CodeValueOutOfRange},
		{"int fraction", model, "i", "0.5", CodeTypeCheckFail},
		{"int string", model, "i", `"1"`, CodeTypeCheckFail},
		{"int beyond int64", model, "i", "1e30", CodeValueOutOfRange},
		{"double unbounded", model, "d", "-1e300", CodeOK},
		{"double overflow", model, "d", "1e999", CodeValueOutOfRange},
		{"string at limit", model, "s", `"abc"`, CodeOK},
		{"string over limit counts bytes", model, "s", `"ab€"`, CodeValueOutOfRange},
		{"string given number", model, "s", "1", CodeTypeCheckFail},
		{"not in model", model, "x", "1", CodePropertyNotFound},
		{"no model, long string", nil, "x", `"` + strings.Repeat("a", 1025) + `"`, CodeValueOutOfRange},
		{"no model, number", nil, "x", "-12.5e3", CodeOK},
		{"no model, infinite number", nil, "x", "1e999", CodeValueOutOfRange},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.model, []string{tc.prop}, map[string]json.RawMessage{tc.prop: json.RawMessage(tc.value)})
			code := CodeOK
			if err != nil {
				code = err.Code
				if err.Property != tc.prop || err.Error() == "" {
					t.Errorf("error %+v", err)
				}
			}
			if code != tc.code {
				t.Fatalf("code %d (%v), want %d", code, err, tc.code)
			}
		})
	}
}

func TestValidateModel(t *testing.T) {
	bad := []struct {
		name  string
		model []store.PropertyDef
		want  string
	}{
		{"empty name", []store.PropertyDef{{Name: "", Type: "int"}}, "properties[0].name"},
		{"control character in name", []store.PropertyDef{{Name: "a\nb", Type: "int"}}, "control character"},
		{"bad type", []store.PropertyDef{{Name: "a", Type: "bool"}}, "properties[0].type"},
		{"duplicate", []store.PropertyDef{{Name: "a", Type: "int"}, {Name: "a", Type: "int"}}, "twice"},
		{"min over max", []store.PropertyDef{{Name: "a", Type: "double", Min: f(2), Max: f(1)}}, "greater than max"},
		{"range on string", []store.PropertyDef{{Name: "a", Type: "string", Min: f(1)}}, "only for int and double"},
		{"length on int", []store.PropertyDef{{Name: "a", Type: "int", MaxLength: n(1)}}, "only for type string"},
		{"negative length", []store.PropertyDef{{Name: "a", Type: "string", MaxLength: n(-1)}}, "max_length"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateModel(tc.model)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want mention of %q", err, tc.want)
			}
		})
	}
	if err := ValidateModel([]store.PropertyDef{{Name: "a.b-c_d", Type: "string", MaxLength: n(10)}, {Name: "color/rgb 温度", Type: "string"}, {Name: "x", Type: "int", Min: f(0)}}); err != nil {
		t.Fatal(err)
	}
}
