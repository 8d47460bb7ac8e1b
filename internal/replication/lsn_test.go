package replication

import (
	"encoding/json"
	"testing"
)

func TestParseLSN(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    LSN
		wantErr bool
	}{
		"parses the form PostgreSQL prints":            {in: "16/B374D848", want: 0x16_B374D848},
		"parses the first location of a fresh cluster": {in: "0/1000000", want: 0x1000000},
		"parses lower-case digits":                     {in: "a/ff", want: 0xA_000000FF},
		"parses the largest location":                  {in: "FFFFFFFF/FFFFFFFF", want: 0xFFFFFFFF_FFFFFFFF},
		"parses halves with leading zeros":             {in: "00000016/0000000A", want: 0x16_0000000A},
		"refuses a value without a slash":              {in: "16B374D848", wantErr: true},
		"refuses an empty high half":                   {in: "/B374D848", wantErr: true},
		"refuses an empty low half":                    {in: "16/", wantErr: true},
		"refuses a half of nine digits":                {in: "16/1B374D848", wantErr: true},
		"refuses a non-hexadecimal digit":              {in: "16/B374D84G", wantErr: true},
		"refuses a 0x prefix":                          {in: "0x16/B374D848", wantErr: true},
		"refuses a sign":                               {in: "+16/B374D848", wantErr: true},
		"refuses surrounding spaces":                   {in: " 16/B374D848", wantErr: true},
		"refuses a second slash":                       {in: "16/B374/D848", wantErr: true},
		"refuses the empty string":                     {in: "", wantErr: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseLSN(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseLSN(%q) = %v, want an error", tt.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseLSN(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ParseLSN(%q) = %#x, want %#x", tt.in, uint64(got), uint64(tt.want))
			}
		})
	}
}

func TestLSNString(t *testing.T) {
	tests := map[string]struct {
		in   LSN
		want string
	}{
		"prints like PostgreSQL, upper case":     {in: 0x16_B374D848, want: "16/B374D848"},
		"prints halves without leading zeros":    {in: 0x1_0000000A, want: "1/A"},
		"prints the zero location as 0/0":        {in: 0, want: "0/0"},
		"prints a location below 4 GiB with 0/…": {in: 0x3000060, want: "0/3000060"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tt.in.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			back, err := ParseLSN(tt.in.String())
			if err != nil || back != tt.in {
				t.Errorf("ParseLSN(String()) = %v, %v, want %v", back, err, tt.in)
			}
		})
	}
}

func TestLSNCompare(t *testing.T) {
	tests := map[string]struct{ lower, higher string }{
		"the high half dominates the low half":        {"1/FFFFFFFF", "2/0"},
		"more digits is further, unlike string order": {"9/0", "10/0"},
		"the low half orders within one high half":    {"16/B374D838", "16/B374D848"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if lo, hi := mustLSN(t, tt.lower), mustLSN(t, tt.higher); lo >= hi {
				t.Errorf("%s < %s is false", tt.lower, tt.higher)
			}
		})
	}
}

func TestBytesBehind(t *testing.T) {
	tests := map[string]struct {
		standby, primary string
		want             uint64
	}{
		"a standby at the primary's location is 0 bytes behind":  {"16/B374D848", "16/B374D848", 0},
		"a standby 16 bytes short is 16 bytes behind":            {"16/B374D838", "16/B374D848", 16},
		"lag crosses the boundary of the halves":                 {"1/FFFFFFF0", "2/10", 0x20},
		"a standby ahead of a stale primary reading is 0 behind": {"16/B374D858", "16/B374D848", 0},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got := mustLSN(t, tt.standby).BytesBehind(mustLSN(t, tt.primary))
			if got != tt.want {
				t.Errorf("BytesBehind = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestLSNJSON(t *testing.T) {
	var got struct {
		Replay LSN `json:"replay"`
	}
	if err := json.Unmarshal([]byte(`{"replay":"16/B374D848"}`), &got); err != nil {
		t.Fatalf("decoding an LSN from JSON: %v", err)
	}
	if got.Replay != 0x16_B374D848 {
		t.Errorf("decoded %v, want 16/B374D848", got.Replay)
	}
	out, err := json.Marshal(got)
	if err != nil || string(out) != `{"replay":"16/B374D848"}` {
		t.Errorf("encoding: %s, %v", out, err)
	}
	if err := json.Unmarshal([]byte(`{"replay":"16-B374D848"}`), &got); err == nil {
		t.Errorf("decoding a malformed LSN succeeded")
	}
}
