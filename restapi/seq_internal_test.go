package restapi

import "testing"

func TestFingerprint(t *testing.T) {
	fp := func(body string) string {
		obj, err := parseObject([]byte(body), "body")
		if err != nil {
			t.Fatal(err)
		}
		return fingerprint("POST /x", obj)
	}
	base := `{"seq_no":1,"device_name":"dev","properties":[{"name":"a","value":"A"}],"callback":{"url":"u","params":{"x":1,"y":2}}}`
	same := []string{
		`{ "device_name" : "dev", "seq_no":1, "callback":{"params":{"y":2,"x":1},"url":"u"}, "properties":[{"value":"A","name":"a"}] }`,
		`{"seq_no":1,"device_name":"d\u0065v","properties":[{"name":"a","value":"\u0041"}],"callback":{"url":"u","params":{"x":1,"y":2}},"ttl":null}`,
	}
	same = append(same,
		`{"seq_no":1.0,"device_name":"dev","properties":[{"name":"a","value":"A"}],"callback":{"url":"u","params":{"x":1e0,"y":2.00}}}`,
		`{"seq_no":1e0,"device_name":"dev","properties":[{"name":"a","value":"A"}],"callback":{"url":"u","params":{"x":10e-1,"y":2}}}`)
	different := []string{
		`{"seq_no":1.5,"device_name":"dev","properties":[{"name":"a","value":"A"}],"callback":{"url":"u","params":{"x":1,"y":2}}}`,
		`{"seq_no":1,"device_name":"dev","properties":[{"name":"a","value":"B"}],"callback":{"url":"u","params":{"x":1,"y":2}}}`,
		`{"seq_no":1,"device_name":"dev","properties":[{"name":"a","value":"A"}],"callback":{"url":"u","params":{"x":1,"y":2}},"ttl":5}`,
		`{"seq_no":1,"device_name":"dev","properties":[{"name":"a","value":"A"}],"callback":{"url":"u","params":{"x":1}}}`,
	}
	want := fp(base)
	for _, b := range same {
		if fp(b) != want {
			t.Errorf("%s should match %s", b, base)
		}
	}
	for _, b := range different {
		if fp(b) == want {
			t.Errorf("%s should differ from %s", b, base)
		}
	}
	obj, _ := parseObject([]byte(base), "body")
	if fingerprint("POST /y", obj) == want {
		t.Error("endpoint not part of the fingerprint")
	}
}
