package pebble

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestDecodeDeviceMatchesEncodingJSON checks decodeDevice and deviceFlag
// against json.Unmarshal on stored forms and on inputs the fast path must
// leave to it.
func TestDecodeDeviceMatchesEncodingJSON(t *testing.T) {
	full := store.Device{
		AppKey: "app1", Name: "dev-1", Mark: "m", Secret: "s3cr3t", Flag: store.FlagDisabled,
		TimeCreate: 1764000000, TimeActive: 1764000001, Status: 1, ClientIP: "10.0.0.1",
		LastLoginTime: 1764000002, LastLogoutTime: -3, Node: 2, Conn: "c-9", Tags: []string{"a", "b"},
	}
	var inputs []string
	for _, d := range []store.Device{
		full,
		{AppKey: "app1", Name: "dev-2"},
		{AppKey: "app1", Name: "dév-ü", Mark: "<&>", Tags: []string{}},
		{AppKey: "app1", Name: `quote"d\back`, Mark: "line\nbreak"},
	} {
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, string(b))
	}
	inputs = append(inputs,
		`{}`, ` { "name" : "x" , "flag" : 1 } `, `{"flag":1.0}`, `{"flag":1e2}`, `{"flag":+1}`,
		`{"flag":01}`, `{"flag":-0}`, `{"flag":null}`, `{"name":null}`, `{"tags":null}`,
		`{"Flag":1}`, `{"FLAG":1,"flag":0}`, `{"flag":1,"flag":0}`, `{"unknown":{"a":[1,"}"]},"flag":1}`,
		`{"name":"\u0041"}`, `{"name":"a\u2028"}`, "{\"name\":\"bad\xff\"}", `{"flag":99999999999999999999}`,
		`{"tags":["a",1]}`, `{"tags":["a"]`, `{"flag":1}x`, `[]`, `{"name":"x",}`, `{"status":true}`,
		`{"tags":[]}`, `{"tags":[ ]}`, `{"tags":[ "a" , "b" ]}`, `{"tags":["a\\u0041"]}`, `{"node":2,"conn":"c","tags":["x"]}`,
		// Values that end where the JSON grammar says and keys whose text
		// is not UTF-8 (jsonfast's rules, which encoding/json follows).
		`{"x":tru,"flag":1}`, `{"x":1.2.3,"flag":1}`, `{"x":-,"flag":1}`, `{"x":nullx,"flag":1}`, `{"flag":1 }`,
		"{\"k\xff\":1,\"flag\":1}", `{"é":1,"flag":1}`, `{"tags":["a","b\xff"]}`,
	)
	for _, in := range inputs {
		var want store.Device
		wantErr := json.Unmarshal([]byte(in), &want)
		var got store.Device
		gotErr := decodeDevice([]byte(in), &got)
		if (wantErr != nil) != (gotErr != nil) || wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("decodeDevice(%s) = %+v, %v; encoding/json gives %+v, %v", in, got, gotErr, want, wantErr)
		}
		var wantFlag struct {
			Flag int `json:"flag"`
		}
		wantFlag.Flag = store.FlagEnabled
		wantErr = json.Unmarshal([]byte(in), &wantFlag)
		flag, gotErr := deviceFlag([]byte(in))
		if (wantErr != nil) != (gotErr != nil) || wantErr == nil && flag != wantFlag.Flag {
			t.Errorf("deviceFlag(%s) = %d, %v; encoding/json gives %d, %v", in, flag, gotErr, wantFlag.Flag, wantErr)
		}
	}
	// A fully set device, as stored, takes the fast path: a field added
	// to store.Device and not to decodeDeviceFast would make every read
	// slow again.
	b, _ := json.Marshal(full)
	var d store.Device
	if !decodeDeviceFast(b, &d) {
		t.Errorf("the stored form %s does not take the fast path", b)
	}
	// So does its flag, read alone (EnabledNames), with escapes in the
	// strings before it.
	for i, in := range inputs[:4] {
		want := store.FlagEnabled
		if i == 0 {
			want = full.Flag
		}
		if flag, ok := storedFlag([]byte(in)); !ok || flag != want {
			t.Errorf("storedFlag(%s) = %d, %v; want %d, true", in, flag, ok, want)
		}
	}
}

// benchDevice is a fully set device as the store writes it.
func benchDevice(b *testing.B) []byte {
	b.Helper()
	v, err := json.Marshal(store.Device{
		AppKey: "app-key-0123456789abcdef", Name: "bench-dev-000042", Mark: "m", Secret: "s3cr3t-0123456789",
		Flag: store.FlagEnabled, TimeCreate: 1764000000, TimeActive: 1764000001, Status: 1, ClientIP: "10.0.0.1",
		LastLoginTime: 1764000002, LastLogoutTime: 1764000003, Node: 2, Conn: "c-9", Tags: []string{"fleet-a", "fw-2"},
	})
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// BenchmarkDecodeDevice is the hand-written read of a stored device, done
// for each target of a fan-out chunk.
func BenchmarkDecodeDevice(b *testing.B) {
	v := benchDevice(b)
	b.ReportAllocs()
	for b.Loop() {
		var d store.Device
		if err := decodeDevice(v, &d); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeviceFlag reads the flag alone, from the stored layout and
// from one with white space, which takes the field-by-field scan.
func BenchmarkDeviceFlag(b *testing.B) {
	v := benchDevice(b)
	var spaced bytes.Buffer
	if err := json.Indent(&spaced, v, "", " "); err != nil {
		b.Fatal(err)
	}
	for name, in := range map[string][]byte{"stored": v, "spaced": spaced.Bytes()} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := deviceFlag(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
