package storeurl

import (
	"strings"
	"testing"
)

// A store URL may be shown (logs, errors) only with its password hidden.
func TestCheckHidesThePassword(t *testing.T) {
	t.Parallel()
	const password = "hunter2pw"
	for _, raw := range []string{
		"redis://:" + password + "@redis.example:6379/0",
		"rediss://user:" + password + "@redis.example:6380/1",
		"redis://:" + password + "@redis.example:6379/0?pool_size=many",
		"redis://:" + password + "@redis.example:6379/x",
		"redis://:" + password + "%zz@redis.example:6379/0",
		"redis://:" + password + "@redis example:6379/0",
		"redis://:" + password + "@[::1/0",
		"redis://:" + password + "\x7f@redis.example/0",
	} {
		shown, err := Check(raw)
		if strings.Contains(shown, password) || strings.Contains(shown, "%zz") {
			t.Errorf("Check shows %q", shown)
		}
		if err != nil && (strings.Contains(err.Error(), password) || strings.Contains(err.Error(), "%zz")) {
			t.Errorf("Check's error shows the password: %v", err)
		}
		if err == nil && !strings.Contains(shown, "xxxxx") {
			t.Errorf("Check(%q) shows %q, want the password as xxxxx", raw, shown)
		}
	}
}
