package main

import (
	"slices"
	"strings"
	"testing"
)

func TestParseNamespaces(t *testing.T) {
	tests := []struct {
		name, flag string
		want       []string
		err        string // a part of the error; "" for none
	}{
		{"empty watches every namespace", "", nil, ""},
		{"one", "shop", []string{"shop"}, ""},
		{"several, spaces and empty items ignored", " shop, billing ,,", []string{"shop", "billing"}, ""},
		{"not a namespace name", "shop,Billing", nil, `"Billing" is not a namespace name`},
		{"a slash", "shop/orders", nil, `"shop/orders" is not a namespace name`},
		{"named twice", "shop,shop", nil, `"shop" is named twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseNamespaces(tt.flag)
			if tt.err == "" {
				if err != nil || !slices.Equal(got, tt.want) {
					t.Errorf("parseNamespaces(%q) = %v, %v; want %v", tt.flag, got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parseNamespaces(%q) = %v, %v; want an error saying %s", tt.flag, got, err, tt.err)
			}
		})
	}
}
