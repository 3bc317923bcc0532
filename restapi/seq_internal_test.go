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

// TestFingerprintNumbersExact: numbers that one float64 holds alike are
// still different requests; one number written two ways is the same.
func TestFingerprintNumbersExact(t *testing.T) {
	fp := func(n string) string {
		obj, err := parseObject([]byte(`{"seq_no":1,"callback":{"url":"u","params":{"x":`+n+`}},"extra":`+n+`}`), "body")
		if err != nil {
			t.Fatal(err)
		}
		return fingerprint("POST /x", obj)
	}
	for _, pair := range [][2]string{
		{"12345678901234567890123", "12345678901234567890124"},
		{"9223372036854775808", "9223372036854775809"},
		{"9007199254740993.0", "9007199254740992"},
		{"0.10000000000000000001", "0.1"},
		{"1e400", "2e400"},
		{"-12345678901234567890123", "12345678901234567890123"},
	} {
		if fp(pair[0]) == fp(pair[1]) {
			t.Errorf("%s and %s count as the same request", pair[0], pair[1])
		}
	}
	for _, pair := range [][2]string{
		{"12345678901234567890123", "1.2345678901234567890123e22"},
		{"12345678901234567890123", "123456789012345678901230e-1"},
		{"9007199254740993", "9007199254740993.000"},
		{"0.1", "1e-1"},
		{"1e400", "10e399"},
		{"1e20", "100000000000000000000"},
		{"-0.0", "0"},
	} {
		if fp(pair[0]) != fp(pair[1]) {
			t.Errorf("%s and %s, one number, count as different requests", pair[0], pair[1])
		}
	}
}
