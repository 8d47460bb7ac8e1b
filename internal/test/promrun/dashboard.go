package promrun

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// PanelQuery is one query of a Grafana dashboard's panel.
type PanelQuery struct {
	// Panel is the panel's title, RefID the query's letter.
	Panel, RefID string
	// Expr is the PromQL, with the dashboard's variables as written.
	Expr string
}

// Variable is one of a dashboard's template variables.
type Variable struct {
	Name, Type string
	// Query is a query variable's definition, such as
	// label_values(dbkeeper_up{namespace="$namespace"}, database).
	Query string
}

// Dashboard is what DashboardQueries reads of a dashboard.
type Dashboard struct {
	Queries   []PanelQuery
	Variables []Variable
}

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // a row's, when collapsed
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// ReadDashboard reads the panel queries (rows' panels included) and the
// template variables of the dashboard JSON file.
func ReadDashboard(file string) (*Dashboard, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("promrun: %w", err)
	}
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("promrun: dashboard %s: %w", file, err)
	}
	out := &Dashboard{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) != "" {
					out.Queries = append(out.Queries, PanelQuery{Panel: p.Title, RefID: t.RefID, Expr: t.Expr})
				}
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		out.Variables = append(out.Variables, Variable{Name: v.Name, Type: v.Type, Query: v.Definition})
	}
	return out, nil
}

// variableRef matches $name, ${name} and ${name:format} in a query.
var variableRef = regexp.MustCompile(`\$\{([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?\}|\$([a-zA-Z_][a-zA-Z0-9_]*)`)

// Expand replaces the variables of expr with their values in values
// (user variables by name, Grafana's own such as __range and
// __rate_interval too), or returns an error naming those it has no value
// for, so that a query with a new variable is not run half-expanded.
func Expand(expr string, values map[string]string) (string, error) {
	var missing []string
	out := variableRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := variableRef.FindStringSubmatch(ref)
		name := m[1] + m[2]
		v, ok := values[name]
		if !ok {
			if !slices.Contains(missing, name) {
				missing = append(missing, name)
			}
			return ref
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("promrun: no value for the variable(s) %s of %s", strings.Join(missing, ", "), expr)
	}
	return out, nil
}

// labelValuesCall matches a variable's label_values(match, label).
var labelValuesCall = regexp.MustCompile(`^\s*label_values\(\s*(.+?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// LabelValuesQuery splits a query variable's label_values(match, label)
// into its series selector and label; ok is false for another query.
func LabelValuesQuery(definition string) (match, label string, ok bool) {
	m := labelValuesCall.FindStringSubmatch(definition)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}
