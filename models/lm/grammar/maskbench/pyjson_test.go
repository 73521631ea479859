package maskbench

import "testing"

// TestPyDumps: instances are written as Python's json.dumps writes them
// (the expected texts are its output, python3 3.12).
func TestPyDumps(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a":1,"b":[1.0,2.5e-7,1e16,1E+2,-0,-0.0,123456789012345678901234567890],"c":"x\"\\\n\t\u0001é中😀<>&` + "\u2028" + `"}`,
			`{"a": 1, "b": [1.0, 2.5e-07, 1e+16, 100.0, 0, -0.0, 123456789012345678901234567890], "c": "x\"\\\n\t\u0001é中😀<>&` + "\u2028" + `"}`},
		{`[]`, `[]`},
		{` {} `, `{}`},
		{`[{"k":{}},null,true,false,0.1,1e400]`, `[{"k": {}}, null, true, false, 0.1, Infinity]`},
	} {
		got, err := pyDumps([]byte(tc.in))
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if string(got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
	if _, err := pyDumps([]byte(`[1] 2`)); err == nil {
		t.Error("trailing data accepted")
	}
}
