package runner

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
)

func TestParseOutputs(t *testing.T) {
	const secret = "hunter2-do-not-leak"
	tests := []struct {
		name string
		json string
		want map[string]string // name -> compact JSON value
		err  string
	}{
		{
			name: "every type, sensitive left out",
			json: `{
  "name": {"sensitive": false, "type": "string", "value": "web"},
  "count": {"sensitive": false, "type": "number", "value": 3},
  "ratio": {"sensitive": false, "type": "number", "value": 0.25},
  "enabled": {"sensitive": false, "type": "bool", "value": true},
  "zones": {"sensitive": false, "type": ["tuple", ["string", "string"]], "value": ["a", "b"]},
  "tags": {"sensitive": false, "type": ["object", {"team": "string"}], "value": {"team": "a"}},
  "password": {"sensitive": true, "type": "string", "value": "` + secret + `"}
}`,
			want: map[string]string{"name": `"web"`, "count": `3`, "ratio": `0.25`, "enabled": `true`, "zones": `["a","b"]`, "tags": `{"team":"a"}`},
		},
		{name: "no outputs", json: "{}\n", want: map[string]string{}},
		{name: "only sensitive", json: `{"p": {"sensitive": true, "type": "string", "value": "` + secret + `"}}`, want: map[string]string{}},
		{name: "not saying whether sensitive is taken as sensitive", json: `{"p": {"type": "string", "value": "` + secret + `"}}`, want: map[string]string{}},
		{name: "value compacted", json: `{"m": {"sensitive": false, "value": {
    "a" : [ 1,
      2 ]
  }}}`, want: map[string]string{"m": `{"a":[1,2]}`}},
		{name: "no value is null", json: `{"n": {"sensitive": false, "type": "string"}}`, want: map[string]string{"n": `null`}},
		{name: "invalid JSON", json: `{"p": {"sensitive": true, "value": "` + secret + `"`, err: "did not print a JSON object of outputs"},
		{name: "not JSON at all", json: "Warning: " + secret, err: "did not print a JSON object of outputs"},
		{name: "empty", json: "", err: "did not print a JSON object of outputs"},
		{name: "null", json: "null", err: "did not print a JSON object of outputs"},
		{name: "array", json: `["` + secret + `"]`, err: "did not print a JSON object of outputs"},
		{name: "output not an object", json: `{"p": "` + secret + `"}`, err: "did not print a JSON object of outputs"},
		{name: "sensitive not a bool", json: `{"p": {"sensitive": "no", "value": "` + secret + `"}}`, err: "did not print a JSON object of outputs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseOutputs([]byte(tt.json))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("parseOutputs = %v, %v; want an error containing %q", got, err, tt.err)
				}
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("error %q quotes the input", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseOutputs: %v", err)
			}
			gotStrings := map[string]string{}
			for k, v := range got {
				gotStrings[k] = string(v)
			}
			if !maps.Equal(gotStrings, tt.want) {
				t.Fatalf("parseOutputs = %v; want %v", gotStrings, tt.want)
			}
			if b, _ := json.Marshal(got); strings.Contains(string(b), secret) {
				t.Fatalf("outputs %s carry the sensitive value", b)
			}
		})
	}
}
