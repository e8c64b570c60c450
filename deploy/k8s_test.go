package deploy_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	k8syaml "sigs.k8s.io/yaml"

	"github.com/acp-gateway/acp-gateway/gateway/agent"
	"github.com/acp-gateway/acp-gateway/statestore/redisstore"
)

const (
	k8sNamespace = "acp-gateway"
	gatewayName  = "acp-gateway" // the Deployment, its container's image, the scrape job
	// shutdownDrain is how long `serve` waits for connections and streams
	// to end after SIGTERM (cmd/acp-gateway/main.go), and leaseRelease and
	// traceFlush bound the session manager's lease hand-over and the span
	// export that follow it.
	shutdownDrain = 10 * time.Second
	leaseRelease  = 5 * time.Second
	traceFlush    = 5 * time.Second
)

// overlays are the kustomizations of deploy/k8s/overlays.
var overlays = []struct {
	name     string
	replicas int32
	redis    string // "": bolt store; "in-cluster": components/redis; "external": the operator's Secret
}{
	{"single", 1, ""},
	{"replicated", 3, "in-cluster"},
	{"replicated-external-redis", 3, "external"},
}

// serviceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor the
// manifests use; any other field fails the strict decoding.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel          string               `json:"jobLabel,omitempty"`
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector *struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path,omitempty"`
			Scheme        string `json:"scheme,omitempty"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// workload is a Deployment's or StatefulSet's pod template.
type workload struct {
	kind, name string
	template   *corev1.PodTemplateSpec
	selector   *metav1.LabelSelector
	claims     []corev1.PersistentVolumeClaim // a StatefulSet's volumeClaimTemplates
}

func (w workload) String() string { return w.kind + " " + w.name }

// rendered is one overlay built by kustomize and decoded.
type rendered struct {
	overlay         string
	namespaces      map[string]*corev1.Namespace
	serviceAccounts map[string]*corev1.ServiceAccount
	configMaps      map[string]*corev1.ConfigMap
	secrets         map[string]*corev1.Secret
	services        map[string]*corev1.Service
	claims          map[string]*corev1.PersistentVolumeClaim
	deployments     map[string]*appsv1.Deployment
	statefulSets    map[string]*appsv1.StatefulSet
	budgets         map[string]*policyv1.PodDisruptionBudget
	policies        map[string]*networkingv1.NetworkPolicy
	monitors        map[string]*serviceMonitor
	workloads       []workload
}

// decodeInto returns what decodes one manifest into a new T, failing on
// unknown or duplicate fields, and records it in *m by name.
func decodeInto[T any, PT interface {
	*T
	metav1.Object
}](t *testing.T, m *map[string]*T) func(doc []byte, id string) {
	return func(doc []byte, id string) {
		t.Helper()
		v := PT(new(T))
		if err := k8syaml.UnmarshalStrict(doc, v); err != nil {
			t.Errorf("%s: %v", id, err)
			return
		}
		if _, dup := (*m)[v.GetName()]; dup {
			t.Errorf("%s: two objects of the kind have this name", id)
		}
		if v.GetNamespace() != k8sNamespace && !strings.HasPrefix(id, "v1/Namespace ") {
			t.Errorf("%s: namespace %q, want %q", id, v.GetNamespace(), k8sNamespace)
		}
		if *m == nil {
			*m = map[string]*T{}
		}
		(*m)[v.GetName()] = v
	}
}

// render builds an overlay with kustomize's library (what `kubectl apply -k`
// runs) and decodes every object strictly into its typed API struct.
func render(t *testing.T, overlay string) *rendered {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("k8s", "overlays", overlay))
	if err != nil {
		t.Fatal(err)
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build deploy/k8s/overlays/%s: %v", overlay, err)
	}
	r := &rendered{overlay: overlay}
	decoders := map[string]func(doc []byte, id string){
		"v1/Namespace":                            decodeInto(t, &r.namespaces),
		"v1/ServiceAccount":                       decodeInto(t, &r.serviceAccounts),
		"v1/ConfigMap":                            decodeInto(t, &r.configMaps),
		"v1/Secret":                               decodeInto(t, &r.secrets),
		"v1/Service":                              decodeInto(t, &r.services),
		"v1/PersistentVolumeClaim":                decodeInto(t, &r.claims),
		"apps/v1/Deployment":                      decodeInto(t, &r.deployments),
		"apps/v1/StatefulSet":                     decodeInto(t, &r.statefulSets),
		"policy/v1/PodDisruptionBudget":           decodeInto(t, &r.budgets),
		"networking.k8s.io/v1/NetworkPolicy":      decodeInto(t, &r.policies),
		"monitoring.coreos.com/v1/ServiceMonitor": decodeInto(t, &r.monitors),
	}
	for _, res := range resMap.Resources() {
		doc, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		gvk := res.GetApiVersion() + "/" + res.GetKind()
		id := gvk + " " + res.GetName()
		if decode, ok := decoders[gvk]; ok {
			decode(doc, id)
		} else {
			t.Errorf("%s: a kind this test does not know; teach it to decode and check it", id)
		}
	}
	for name, d := range r.deployments {
		r.workloads = append(r.workloads, workload{kind: "Deployment", name: name, template: &d.Spec.Template, selector: d.Spec.Selector})
	}
	for name, s := range r.statefulSets {
		r.workloads = append(r.workloads, workload{kind: "StatefulSet", name: name, template: &s.Spec.Template, selector: s.Spec.Selector, claims: s.Spec.VolumeClaimTemplates})
	}
	slices.SortFunc(r.workloads, func(a, b workload) int { return strings.Compare(a.String(), b.String()) })
	if t.Failed() {
		t.FailNow()
	}
	return r
}

// selector turns a label selector into a labels.Selector; an empty one
// (which selects everything) is an error.
func selector(t *testing.T, what string, sel *metav1.LabelSelector) labels.Selector {
	t.Helper()
	if sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
		t.Fatalf("%s: empty selector", what)
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return s
}

// selected returns the workloads whose pods s selects.
func (r *rendered) selected(s labels.Selector) []workload {
	var ws []workload
	for _, w := range r.workloads {
		if s.Matches(labels.Set(w.template.Labels)) {
			ws = append(ws, w)
		}
	}
	return ws
}

// containerPort resolves a port (a number or a container port's name) in
// a pod template.
func containerPort(tmpl *corev1.PodTemplateSpec, p intstr.IntOrString) (int32, bool) {
	for _, c := range tmpl.Spec.Containers {
		for _, cp := range c.Ports {
			if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
				return cp.ContainerPort, true
			}
		}
	}
	return 0, false
}

func namedPort(c *corev1.Container, name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// operatorSecrets are the Secrets an overlay references that the operator
// creates (deploy/README.md), so they are not in its output.
func operatorSecrets(redis string) []string {
	s := []string{"acp-gateway-tokens"}
	if redis != "" {
		s = append(s, "acp-gateway-replica")
	}
	if redis == "external" {
		s = append(s, "acp-gateway-redis")
	}
	return s
}

func TestKubernetes(t *testing.T) {
	flags := knownServeFlags(t)
	uid := readImage(t, parseDockerfile(t).stage(t, "gateway")).uid
	for _, ov := range overlays {
		t.Run(ov.name, func(t *testing.T) {
			r := render(t, ov.name)
			checkObjects(t, r, ov.redis)
			gw := checkGatewayDeployment(t, r, ov.replicas, uid)
			settings := checkServeSettings(t, r, gw, flags, ov.redis)
			checkNetworking(t, r, gw, settings)
			checkRedis(t, r, gw, ov.redis)
			runServe(t, gw, settings)
		})
	}
}

// checkObjects checks what every overlay must hold, and what any workload
// must be: restricted by the Pod Security Standard (but for what the
// gateway's agent sandbox needs, see checkSandboxContext), its resources
// bounded.
func checkObjects(t *testing.T, r *rendered, redis string) {
	t.Helper()
	ns := r.namespaces[k8sNamespace]
	if ns == nil || len(r.namespaces) != 1 {
		t.Fatalf("want one Namespace, %s, got %d", k8sNamespace, len(r.namespaces))
	}
	// The gateway's pod is outside the baseline Pod Security Standard by
	// its seccomp and AppArmor profiles (Unconfined, for the agents'
	// sandbox), so the namespace cannot enforce a level; it warns and
	// audits restricted, so that whatever else strays shows, and this test
	// holds every pod to restricted but for the sandbox's fields.
	for label, want := range map[string]string{
		"pod-security.kubernetes.io/enforce": "privileged",
		"pod-security.kubernetes.io/warn":    "restricted",
		"pod-security.kubernetes.io/audit":   "restricted",
	} {
		if got := ns.Labels[label]; got != want {
			t.Errorf("Namespace %s: label %s: %q, want %q", ns.Name, label, got, want)
		}
	}
	for _, kind := range []struct {
		name string
		n    int
	}{
		{"Deployment", len(r.deployments)}, {"Service", len(r.services)}, {"PodDisruptionBudget", len(r.budgets)},
		{"NetworkPolicy", len(r.policies)}, {"ServiceMonitor", len(r.monitors)}, {"ConfigMap", len(r.configMaps)},
		{"ServiceAccount", len(r.serviceAccounts)},
	} {
		if kind.n == 0 {
			t.Errorf("no %s", kind.name)
		}
	}
	for _, w := range r.workloads {
		checkPodTemplate(t, r, w)
		// Every Secret a pod references is in the output, or is one the
		// operator creates.
		spec := &w.template.Spec
		var refs []string
		for _, v := range spec.Volumes {
			if v.Secret != nil {
				refs = append(refs, v.Secret.SecretName)
			}
			if v.ConfigMap != nil && r.configMaps[v.ConfigMap.Name] == nil {
				t.Errorf("%s: volume %s: no ConfigMap %s", w, v.Name, v.ConfigMap.Name)
			}
			if v.PersistentVolumeClaim != nil && r.claims[v.PersistentVolumeClaim.ClaimName] == nil {
				t.Errorf("%s: volume %s: no PersistentVolumeClaim %s", w, v.Name, v.PersistentVolumeClaim.ClaimName)
			}
		}
		for _, c := range spec.Containers {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					ref := e.ValueFrom.SecretKeyRef
					refs = append(refs, ref.Name)
					if s := r.secrets[ref.Name]; s != nil {
						if _, ok := s.Data[ref.Key]; !ok {
							t.Errorf("%s: env %s: Secret %s has no key %s", w, e.Name, ref.Name, ref.Key)
						}
					}
				}
			}
		}
		for _, name := range refs {
			if r.secrets[name] == nil && !slices.Contains(operatorSecrets(redis), name) {
				t.Errorf("%s: references Secret %s, which is neither in the output nor one deploy/README.md has the operator create", w, name)
			}
			if r.secrets[name] != nil && slices.Contains(operatorSecrets(redis), name) {
				t.Errorf("%s: Secret %s is in the output, but the operator is told to create it", w, name)
			}
		}
		if sa := spec.ServiceAccountName; sa != "" && r.serviceAccounts[sa] == nil {
			t.Errorf("%s: no ServiceAccount %s", w, sa)
		}
	}
}

// checkPodTemplate checks a workload against the "restricted" Pod Security
// Standard and the rules every workload here follows.
func checkPodTemplate(t *testing.T, r *rendered, w workload) {
	t.Helper()
	sel := selector(t, w.String()+" selector", w.selector)
	if !sel.Matches(labels.Set(w.template.Labels)) {
		t.Errorf("%s: selector %v does not select its own pods %v", w, sel, w.template.Labels)
	}
	if others := r.selected(sel); len(others) != 1 {
		t.Errorf("%s: selector %v selects the pods of %v", w, sel, others)
	}
	spec := &w.template.Spec
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("%s: host namespaces", w)
	}
	if spec.SecurityContext != nil && (len(spec.SecurityContext.Sysctls) > 0 || spec.SecurityContext.SELinuxOptions != nil) {
		t.Errorf("%s: sysctls or seLinuxOptions", w)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("%s: automountServiceAccountToken must be false (nothing here uses the API; agents must not get a token)", w)
	}
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
		if v.HostPath != nil {
			t.Errorf("%s: volume %s: hostPath", w, v.Name)
		}
		// Exactly one source (a patch that adds one must remove the other).
		sources := 0
		vs := reflect.ValueOf(v.VolumeSource)
		for i := range vs.NumField() {
			if !vs.Field(i).IsNil() {
				sources++
			}
		}
		if sources != 1 {
			t.Errorf("%s: volume %s has %d sources, want 1", w, v.Name, sources)
		}
	}
	mounted := map[string]bool{}
	for _, c := range spec.Containers {
		id := fmt.Sprintf("%s container %s", w, c.Name)
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("%s: no securityContext", id)
			continue
		}
		if !ptrTrue(sc.RunAsNonRoot) && !ptrTrue(psc.RunAsNonRoot) {
			t.Errorf("%s: runAsNonRoot is not set", id)
		}
		for _, u := range []*int64{sc.RunAsUser, psc.RunAsUser} {
			if u != nil && *u == 0 {
				t.Errorf("%s: runAsUser 0", id)
			}
		}
		if sandboxed(w, &c) {
			checkSandboxContext(t, id, spec, &c)
		} else {
			seccomp := sc.SeccompProfile
			if seccomp == nil {
				seccomp = psc.SeccompProfile
			}
			if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s: seccompProfile %v, want RuntimeDefault", id, seccomp)
			}
			for _, p := range []*corev1.AppArmorProfile{sc.AppArmorProfile, psc.AppArmorProfile} {
				if p != nil && p.Type == corev1.AppArmorProfileTypeUnconfined {
					t.Errorf("%s: appArmorProfile Unconfined", id)
				}
			}
			if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
				t.Errorf("%s: procMount %s, want Default", id, *sc.ProcMount)
			}
		}
		if sc.SELinuxOptions != nil || sc.WindowsOptions != nil {
			t.Errorf("%s: seLinuxOptions or windowsOptions", id)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation must be false", id)
		}
		if ptrTrue(sc.Privileged) {
			t.Errorf("%s: privileged", id)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: capabilities %v, want drop [ALL] and nothing added", id, sc.Capabilities)
		}
		if !ptrTrue(sc.ReadOnlyRootFilesystem) {
			t.Errorf("%s: readOnlyRootFilesystem must be true", id)
		}
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, okReq := c.Resources.Requests[res]
			lim, okLim := c.Resources.Limits[res]
			if !okReq || !okLim {
				t.Errorf("%s: want %s request and limit", id, res)
			} else if req.Cmp(lim) > 0 {
				t.Errorf("%s: %s request %s above its limit %s", id, res, req.String(), lim.String())
			}
		}
		if c.ReadinessProbe == nil || c.LivenessProbe == nil {
			t.Errorf("%s: want readiness and liveness probes", id)
		}
		for _, m := range c.VolumeMounts {
			mounted[m.Name] = true
			_, isVolume := volumes[m.Name]
			isClaim := slices.ContainsFunc(w.claims, func(c corev1.PersistentVolumeClaim) bool { return c.Name == m.Name })
			if !isVolume && !isClaim {
				t.Errorf("%s: mounts %s, which is no volume", id, m.Name)
			}
		}
	}
	for name := range volumes {
		if !mounted[name] {
			t.Errorf("%s: volume %s is not mounted", w, name)
		}
	}
}

func ptrTrue(b *bool) bool { return b != nil && *b }

// sandboxed reports whether c is the gateway's container, which runs every
// agent in a bubblewrap sandbox (config.yaml's sandbox: bwrap).
func sandboxed(w workload, c *corev1.Container) bool {
	return w.kind == "Deployment" && w.name == gatewayName && c.Name == "gateway"
}

// checkSandboxContext checks that the gateway's container has what
// bubblewrap needs to make each agent's sandbox inside it, and nothing
// more (deploy/README.md, "Agents and the sandbox"); checkPodTemplate
// checks the rest of the restricted Pod Security Standard for it as for any
// container: non-root, no privilege escalation, every capability dropped,
// none added, not privileged, a read-only root, no host namespaces.
//
// What bubblewrap needs, unprivileged: to make user, mount and pid
// namespaces (unshare and clone with CLONE_NEW* flags, which the runtime's
// default seccomp profile allows only with CAP_SYS_ADMIN), to mount in them
// (which the runtime's default AppArmor profile denies), and to mount a
// fresh /proc for its pid namespace (which the kernel refuses while parts
// of the container's /proc are masked). Kubernetes lets a container's
// /proc be unmasked only in a pod with a user namespace of its own.
func checkSandboxContext(t *testing.T, id string, spec *corev1.PodSpec, c *corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if spec.HostUsers == nil || *spec.HostUsers {
		t.Errorf("%s: want hostUsers: false on the pod (procMount: Unmasked needs it; the pod's users are then none of the node's)", id)
	}
	// A pod's user namespace maps the IDs 0-65535.
	for _, n := range []*int64{psc.RunAsUser, psc.RunAsGroup, psc.FSGroup, sc.RunAsUser, sc.RunAsGroup} {
		if n != nil && *n > 65535 {
			t.Errorf("%s: user or group %d, outside the IDs of a pod's user namespace (0-65535)", id, *n)
		}
	}
	if sc.ProcMount == nil || *sc.ProcMount != corev1.UnmaskedProcMount {
		t.Errorf("%s: procMount %v, want Unmasked (each sandbox mounts a fresh /proc)", id, sc.ProcMount)
	}
	// Seccomp and AppArmor: Unconfined, or a Localhost profile of the
	// operator's that allows what bubblewrap does; set on the container,
	// so that no other container of the pod gets it.
	if p := sc.SeccompProfile; p == nil || !(p.Type == corev1.SeccompProfileTypeUnconfined ||
		p.Type == corev1.SeccompProfileTypeLocalhost && p.LocalhostProfile != nil && *p.LocalhostProfile != "") {
		t.Errorf("%s: seccompProfile %v, want Unconfined, or Localhost naming a profile (the runtime's default refuses user namespaces)", id, p)
	}
	if p := sc.AppArmorProfile; p == nil || !(p.Type == corev1.AppArmorProfileTypeUnconfined ||
		p.Type == corev1.AppArmorProfileTypeLocalhost && p.LocalhostProfile != nil && *p.LocalhostProfile != "") {
		t.Errorf("%s: appArmorProfile %v, want Unconfined, or Localhost naming a profile (the runtime's default denies mount)", id, p)
	}
	if psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeUnconfined ||
		psc.AppArmorProfile != nil && psc.AppArmorProfile.Type == corev1.AppArmorProfileTypeUnconfined {
		t.Errorf("%s: an Unconfined profile on the pod: set it on the gateway's container alone", id)
	}
	// No more than that: bubblewrap needs no capability and no setuid
	// binary, so neither privilege nor escalation.
	if ptrTrue(sc.Privileged) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: want privileged unset, allowPrivilegeEscalation: false, capabilities drop [ALL] and none added", id)
	}
	if !ptrTrue(sc.RunAsNonRoot) && !ptrTrue(psc.RunAsNonRoot) {
		t.Errorf("%s: runAsNonRoot is not set", id)
	}
	if !ptrTrue(sc.ReadOnlyRootFilesystem) {
		t.Errorf("%s: readOnlyRootFilesystem must be true (the sandbox only bind-mounts the image's directories, read-only)", id)
	}
	if spec.HostPID || spec.HostNetwork || spec.HostIPC || spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace {
		t.Errorf("%s: host namespaces, or a process namespace shared with other containers", id)
	}
}

// checkGatewayDeployment checks the gateway's Deployment and returns its
// container.
func checkGatewayDeployment(t *testing.T, r *rendered, replicas int32, uid int) *workload {
	t.Helper()
	d := r.deployments[gatewayName]
	if d == nil {
		t.Fatalf("no Deployment %s", gatewayName)
	}
	var w *workload
	for i := range r.workloads {
		if r.workloads[i].kind == "Deployment" && r.workloads[i].name == gatewayName {
			w = &r.workloads[i]
		}
	}
	spec := &d.Spec.Template.Spec
	if d.Spec.Replicas == nil || *d.Spec.Replicas != replicas {
		t.Errorf("replicas %v, want %d", d.Spec.Replicas, replicas)
	}
	if len(spec.Containers) != 1 || spec.Containers[0].Name != "gateway" {
		t.Fatalf("want one container, gateway, got %d", len(spec.Containers))
	}
	c := &spec.Containers[0]
	if name, _, _ := strings.Cut(path.Base(c.Image), ":"); name != gatewayName {
		t.Errorf("image %s, want the image deploy/Dockerfile builds, %s", c.Image, gatewayName)
	}
	if len(c.Command) != 0 {
		t.Errorf("command %q: leave it empty, so that the image's ENTRYPOINT (the binary) runs", c.Command)
	}
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != int64(uid) || psc.FSGroup == nil || *psc.FSGroup != int64(uid) {
		t.Errorf("pod securityContext %+v: want runAsUser and fsGroup %d, the image's USER", psc, uid)
	}

	// Probes on the paths the binary serves, on its API port.
	httpPort, ok := namedPort(c, "http")
	if !ok {
		t.Fatal("no container port named http")
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}, {"startup", c.StartupProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s probe: want an HTTP GET of %s", p.name, p.path)
			continue
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s probe path %s, want %s", p.name, p.probe.HTTPGet.Path, p.path)
		}
		if port, ok := containerPort(&d.Spec.Template, p.probe.HTTPGet.Port); !ok || port != httpPort {
			t.Errorf("%s probe port %s, want the http port %d", p.name, p.probe.HTTPGet.Port.String(), httpPort)
		}
	}

	// Terminating: the preStop pause, then the binary's own shutdown.
	preStop := time.Duration(0)
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	need := preStop + shutdownDrain + 2*agent.DefaultStopGrace + leaseRelease + traceFlush
	if spec.TerminationGracePeriodSeconds == nil {
		t.Fatal("no terminationGracePeriodSeconds")
	}
	if grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second; grace <= need {
		t.Errorf("terminationGracePeriodSeconds %v: want more than %v (preStop %v, drain %v, agents 2×%v, leases %v, spans %v)",
			grace, need, preStop, shutdownDrain, agent.DefaultStopGrace, leaseRelease, traceFlush)
	}

	// The disruption budget covers exactly the gateway's pods, and lets one go.
	for name, b := range r.budgets {
		ws := r.selected(selector(t, "PodDisruptionBudget "+name, b.Spec.Selector))
		if len(ws) != 1 || ws[0].name != gatewayName || ws[0].kind != "Deployment" {
			t.Errorf("PodDisruptionBudget %s selects %v, want Deployment %s", name, ws, gatewayName)
		}
		if b.Spec.MaxUnavailable == nil && b.Spec.MinAvailable == nil {
			t.Errorf("PodDisruptionBudget %s: want maxUnavailable or minAvailable", name)
		}
		if b.Spec.MinAvailable != nil && b.Spec.MinAvailable.IntValue() >= int(replicas) {
			t.Errorf("PodDisruptionBudget %s: minAvailable %s blocks every drain of %d replicas", name, b.Spec.MinAvailable.String(), replicas)
		}
	}
	if len(r.budgets) != 1 {
		t.Errorf("%d PodDisruptionBudgets, want 1", len(r.budgets))
	}

	// The state volume: one replica on a ReadWriteOnce claim is replaced,
	// never rolled (the bolt file is locked by its gateway).
	for _, v := range spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		if replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
			t.Errorf("volume %s on a PersistentVolumeClaim: want 1 replica and strategy Recreate, got %d and %q", v.Name, replicas, d.Spec.Strategy.Type)
		}
	}
	if replicas > 1 {
		if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
			t.Error("several replicas with strategy Recreate: every rollout would stop them all")
		}
		if len(spec.TopologySpreadConstraints) == 0 {
			t.Error("several replicas: want topologySpreadConstraints")
		}
		for _, tsc := range spec.TopologySpreadConstraints {
			ws := r.selected(selector(t, "topologySpreadConstraint", tsc.LabelSelector))
			if len(ws) != 1 || ws[0].name != gatewayName {
				t.Errorf("topologySpreadConstraint selects %v, want the gateway's pods", ws)
			}
		}
	}
	return w
}

// serveSettings are the `acp-gateway serve` settings in force in the
// container: its --config file's, overridden by its args, and where the
// container's files are.
type serveSettings struct {
	values     map[string][]string
	configPath string
	config     []byte
	args       []string // after serve
	env        map[string]string
}

func (s serveSettings) get(name string) string { v, _ := last(s.values, name); return v }

// checkServeSettings checks the gateway container's args and --config file
// against the binary's flags, and the paths and ports they name against
// the container's volumes and ports.
func checkServeSettings(t *testing.T, r *rendered, w *workload, flags map[string]bool, redis string) serveSettings {
	t.Helper()
	spec := &w.template.Spec
	c := &spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("args %q, want serve and its flags", c.Args)
	}
	// $(VAR) in args names a variable of the container.
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for _, a := range c.Args {
		for _, m := range regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).FindAllStringSubmatch(a, -1) {
			if _, ok := env[m[1]]; !ok {
				t.Errorf("arg %q: $(%s) is no env variable of the container, so the kubelet leaves it as it is", a, m[1])
			}
		}
	}
	args, err := parseServeArgs(flags, c.Args[1:])
	if err != nil {
		t.Fatalf("args %q: %v", c.Args, err)
	}
	s := serveSettings{values: map[string][]string{}, args: c.Args[1:], env: env}
	s.configPath, _ = last(args, "config")
	if s.configPath == "" {
		t.Fatal("args: no --config")
	}

	// The mounts: where each absolute path the settings name is.
	type mount struct {
		corev1.VolumeMount
		volume *corev1.Volume
	}
	mountOf := func(p string) (mount, bool) {
		var best mount
		for _, m := range c.VolumeMounts {
			if (p == m.MountPath || strings.HasPrefix(p, m.MountPath+"/")) && len(m.MountPath) > len(best.MountPath) {
				best = mount{VolumeMount: m}
				for i := range spec.Volumes {
					if spec.Volumes[i].Name == m.Name {
						best.volume = &spec.Volumes[i]
					}
				}
			}
		}
		return best, best.volume != nil
	}
	// fileFrom returns the content of a file in a mounted ConfigMap or
	// Secret (nil for a Secret the operator creates), which must be mounted
	// whole (a subPath mount never sees updates).
	fileFrom := func(what, p string) (m mount, content []byte) {
		m, ok := mountOf(p)
		if !ok || m.MountPath != path.Dir(p) || m.SubPath != "" {
			t.Fatalf("%s %s: want a ConfigMap or Secret volume mounted whole at %s", what, p, path.Dir(p))
		}
		key := path.Base(p)
		switch v := m.volume.VolumeSource; {
		case v.ConfigMap != nil && len(v.ConfigMap.Items) == 0:
			cm := r.configMaps[v.ConfigMap.Name]
			data, ok := cm.Data[key]
			if !ok {
				t.Fatalf("%s %s: ConfigMap %s has no key %s", what, p, cm.Name, key)
			}
			return m, []byte(data)
		case v.Secret != nil && len(v.Secret.Items) == 0:
			if s := r.secrets[v.Secret.SecretName]; s != nil {
				return m, s.Data[key]
			}
			return m, nil
		}
		t.Fatalf("%s %s: volume %s is not a ConfigMap or Secret mounted with all its keys", what, p, m.Name)
		return
	}
	_, s.config = fileFrom("--config", s.configPath)

	var config map[string]any
	if err := yaml.Unmarshal(s.config, &config); err != nil {
		t.Fatalf("--config %s: %v", s.configPath, err)
	}
	for key, v := range config {
		if _, ok := flags[key]; !ok || key == "config" {
			t.Errorf("--config %s: %s is no serve flag", s.configPath, key)
		}
		switch v := v.(type) {
		case []any:
			for _, e := range v {
				s.values[key] = append(s.values[key], fmt.Sprint(e))
			}
		case map[string]any:
			for name, cmdline := range v {
				s.values[key] = append(s.values[key], name+"="+fmt.Sprint(cmdline))
			}
		default:
			s.values[key] = []string{fmt.Sprint(v)}
		}
	}
	for key, v := range args {
		s.values[key] = v // flags win
	}
	if _, ok := args["store-file"]; ok {
		delete(s.values, "store") // a --store-file flag wins over the file's store
	}

	// Ports: listen and metrics-listen on all interfaces, at the
	// container's ports.
	for flag, portName := range map[string]string{"listen": "http", "metrics-listen": "metrics"} {
		addr := s.get(flag)
		if host, _, _ := net.SplitHostPort(addr); host != "0.0.0.0" {
			t.Errorf("--%s %q: want 0.0.0.0:PORT", flag, addr)
		}
		if want, ok := namedPort(c, portName); !ok || portOf(t, "--"+flag, addr) != want {
			t.Errorf("--%s %q: want the container port %s (%d)", flag, addr, portName, want)
		}
	}

	// Authentication: the token file, from a Secret mounted whole.
	tokens := s.get("auth-tokens")
	if tokens == "" {
		t.Error("no --auth-tokens: every client could use the gateway")
	} else if m, _ := fileFrom("--auth-tokens", tokens); m.volume.Secret == nil {
		t.Errorf("--auth-tokens %s: want it from a Secret", tokens)
	}

	// The store.
	store := s.get("store")
	switch redis {
	case "":
		p, ok := strings.CutPrefix(store, "bolt:")
		if !ok {
			t.Fatalf("--store %q, want bolt:PATH", store)
		}
		m, ok := mountOf(p)
		if !ok || m.ReadOnly || m.volume.PersistentVolumeClaim == nil {
			t.Errorf("--store %s: want it on a writable PersistentVolumeClaim", store)
		}
		if _, ok := s.values["advertise"]; ok {
			t.Error("--advertise with a store no other replica shares")
		}
	default:
		// The URL, password and all, from a file: not in the args or the
		// environment, where more can read it.
		if store != "" || s.get("store-file") == "" {
			t.Errorf("--store %q, --store-file %q: want the Redis URL from a file", store, s.get("store-file"))
		}
		for flag, secret := range map[string]string{"store-file": "acp-gateway-redis", "replica-secret-file": "acp-gateway-replica"} {
			p := s.get(flag)
			if p == "" {
				t.Errorf("no --%s: with Redis and authentication the gateway does not start", flag)
				continue
			}
			if m, _ := fileFrom("--"+flag, p); m.volume.Secret == nil || m.volume.Secret.SecretName != secret {
				t.Errorf("--%s %s: want it from the Secret %s", flag, p, secret)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "acp-gateway-redis" {
				t.Errorf("env %s: the Redis URL in the environment, where the gateway's every child could read it", e.Name)
			}
		}
		listenPort := portOf(t, "--listen", s.get("listen"))
		if got, want := s.get("advertise"), fmt.Sprintf("http://$(POD_IP):%d", listenPort); got != want {
			t.Errorf("--advertise %q, want %q", got, want)
		}
		e := envVar(c, "POD_IP")
		if e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "status.podIP" {
			t.Error("env POD_IP: want the downward API's status.podIP")
		}
	}

	// The root filesystem is read-only: where the gateway and its agents
	// write must be volumes.
	for _, name := range []string{"HOME", "TMPDIR"} {
		if m, ok := mountOf(env[name]); !ok || m.ReadOnly {
			t.Errorf("env %s=%q: not on a writable volume", name, env[name])
		}
	}
	// Each user's sessions work under the workspace root, which a
	// gateway with users needs.
	if ws := s.get("workspace-root"); ws == "" {
		t.Error("no --workspace-root: with --auth-tokens the gateway does not start")
	} else if m, ok := mountOf(ws); !ok || m.ReadOnly {
		t.Errorf("--workspace-root %s (sessions' working directories): not on a writable volume", ws)
	}

	// Agents: each in a bubblewrap sandbox, said so (not left to the
	// default, which a change of authentication could turn), its
	// workspace and home on the data volume, where the store is (the
	// single overlay's claim, so that they outlive the pod), in
	// directories of their own that hold none of the gateway's files.
	if got := s.get("sandbox"); got != "bwrap" {
		t.Errorf("--sandbox %q, want bwrap: agents would run as the gateway, able to read its token file, its store and the Redis URL", got)
	}
	// The data volume: the bolt file's, or with Redis where base mounts it.
	dataDir := "/var/lib/acp-gateway"
	gatewayFiles := []string{s.configPath, tokens}
	for _, flag := range []string{"store-file", "replica-secret-file"} {
		if f := s.get(flag); f != "" {
			gatewayFiles = append(gatewayFiles, f)
		}
	}
	if p, ok := strings.CutPrefix(s.get("store"), "bolt:"); ok {
		dataDir = path.Dir(p)
		gatewayFiles = append(gatewayFiles, p)
	}
	storeMount, _ := mountOf(dataDir)
	agentDirs := map[string]string{"workspace-root": s.get("workspace-root"), "sandbox-homes": s.get("sandbox-homes")}
	for flag, dir := range agentDirs {
		m, ok := mountOf(dir)
		switch {
		case dir == "" || !path.IsAbs(dir):
			t.Errorf("--%s %q: want an absolute path on the data volume", flag, dir)
			continue
		case !ok || m.ReadOnly || m.Name != storeMount.Name || m.MountPath == dir:
			t.Errorf("--%s %s: want a directory of its own on the writable volume the store is on (%s)", flag, dir, storeMount.MountPath)
		case redis == "" && m.volume.PersistentVolumeClaim == nil:
			t.Errorf("--%s %s: want it on the PersistentVolumeClaim, which outlives the pod", flag, dir)
		}
		for _, f := range gatewayFiles {
			if f == dir || strings.HasPrefix(f, dir+"/") {
				t.Errorf("--%s %s holds the gateway's file %s", flag, dir, f)
			}
		}
		for other, o := range agentDirs {
			if other != flag && (o == dir || strings.HasPrefix(o, dir+"/")) {
				t.Errorf("--%s %s holds --%s %s", flag, dir, other, o)
			}
		}
	}
	// No per-agent cgroup limits: a pod's /sys/fs/cgroup is read-only, and
	// a gateway with authentication refuses to start with limits it cannot
	// set (this test's machine may well have a writable cgroup, and not
	// notice). The container's limits bound the agents together instead.
	for _, flag := range []string{"agent-memory", "agent-pids", "agent-cpu"} {
		if got := s.get(flag); got != "0" {
			t.Errorf("--%s %q, want 0: a pod's cgroup file system is read-only, so the gateway would not start", flag, got)
		}
	}
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Limits[res]; !ok {
			t.Errorf("no %s limit on the container, which bounds all agents together", res)
		}
	}
	return s
}

func envVar(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// checkNetworking checks the Services, NetworkPolicies and ServiceMonitor
// against the pods and the gateway's ports, and the ServiceMonitor's and
// deploy/prometheus's scrape job against each other.
func checkNetworking(t *testing.T, r *rendered, gw *workload, s serveSettings) {
	t.Helper()
	listenPort := portOf(t, "--listen", s.get("listen"))
	metricsPort := portOf(t, "--metrics-listen", s.get("metrics-listen"))
	for name, svc := range r.services {
		ws := r.selected(labels.SelectorFromSet(svc.Spec.Selector))
		if len(svc.Spec.Selector) == 0 || len(ws) != 1 {
			t.Errorf("Service %s selects %v, want one workload's pods", name, ws)
			continue
		}
		for _, p := range svc.Spec.Ports {
			if _, ok := containerPort(ws[0].template, p.TargetPort); !ok {
				t.Errorf("Service %s port %s: targetPort %s is no port of %s", name, p.Name, p.TargetPort.String(), ws[0])
			}
		}
	}
	// The API and the metrics, each to the right port of the gateway.
	for _, want := range []struct {
		service, port string
		target        int32
		headless      bool
	}{{"acp-gateway", "http", listenPort, false}, {"acp-gateway-metrics", "metrics", metricsPort, true}} {
		svc := r.services[want.service]
		if svc == nil {
			t.Errorf("no Service %s", want.service)
			continue
		}
		if ws := r.selected(labels.SelectorFromSet(svc.Spec.Selector)); len(ws) != 1 || ws[0].name != gatewayName {
			t.Errorf("Service %s selects %v, want the gateway's pods", want.service, ws)
		}
		if (svc.Spec.ClusterIP == corev1.ClusterIPNone) != want.headless {
			t.Errorf("Service %s: headless %v, want %v", want.service, !want.headless, want.headless)
		}
		found := false
		for _, p := range svc.Spec.Ports {
			if p.Name == want.port {
				found = true
				if got, _ := containerPort(gw.template, p.TargetPort); got != want.target {
					t.Errorf("Service %s port %s reaches container port %d, want %d", want.service, p.Name, got, want.target)
				}
			}
		}
		if !found {
			t.Errorf("Service %s has no port %s", want.service, want.port)
		}
	}

	// NetworkPolicies: each selects pods and admits their ports; the
	// gateway's admits its API port from anywhere.
	gatewayAdmitsAPI := false
	for name, np := range r.policies {
		ws := r.selected(selector(t, "NetworkPolicy "+name, &np.Spec.PodSelector))
		if len(ws) == 0 {
			t.Errorf("NetworkPolicy %s selects no pods", name)
			continue
		}
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			t.Errorf("NetworkPolicy %s: want policyTypes Ingress", name)
		}
		for _, rule := range np.Spec.Ingress {
			for _, from := range rule.From {
				if from.PodSelector != nil && from.NamespaceSelector == nil && len(r.selected(selector(t, "NetworkPolicy "+name+" from", from.PodSelector))) == 0 {
					t.Errorf("NetworkPolicy %s admits pods %v, and there are none", name, from.PodSelector)
				}
			}
			for _, p := range rule.Ports {
				for _, w := range ws {
					if p.Port == nil {
						t.Errorf("NetworkPolicy %s: a rule admits every port", name)
					} else if n, ok := containerPort(w.template, *p.Port); !ok {
						t.Errorf("NetworkPolicy %s admits port %s, which %s does not have", name, p.Port.String(), w)
					} else if w.name == gatewayName && n == listenPort && len(rule.From) == 0 {
						gatewayAdmitsAPI = true
					}
				}
			}
		}
	}
	if !gatewayAdmitsAPI {
		t.Errorf("no NetworkPolicy admits clients to the gateway's API port %d", listenPort)
	}

	// The ServiceMonitor scrapes the metrics Service as job acp-gateway,
	// the job deploy/prometheus's configuration and rules name.
	job := prometheusJob(t)
	for name, sm := range r.monitors {
		sel := selector(t, "ServiceMonitor "+name, &sm.Spec.Selector)
		var svcs []*corev1.Service
		for _, svc := range r.services {
			if sel.Matches(labels.Set(svc.Labels)) {
				svcs = append(svcs, svc)
			}
		}
		if len(svcs) != 1 || svcs[0].Name != "acp-gateway-metrics" {
			t.Errorf("ServiceMonitor %s selects %d Services, want acp-gateway-metrics alone", name, len(svcs))
			continue
		}
		svc := svcs[0]
		gotJob := svc.Name
		if sm.Spec.JobLabel != "" {
			gotJob = svc.Labels[sm.Spec.JobLabel]
		}
		if gotJob != job.name {
			t.Errorf("ServiceMonitor %s: job %q, want %q (deploy/prometheus)", name, gotJob, job.name)
		}
		for _, ep := range sm.Spec.Endpoints {
			if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
				t.Errorf("ServiceMonitor %s: Service %s has no port %s", name, svc.Name, ep.Port)
			}
			if ep.Path != job.metricsPath {
				t.Errorf("ServiceMonitor %s: path %q, want %q", name, ep.Path, job.metricsPath)
			}
		}
	}
	// prometheus.yml finds the same pods through the headless Service's DNS name.
	svc := r.services["acp-gateway-metrics"]
	wantName := fmt.Sprintf("%s.%s.svc.cluster.local", svc.Name, svc.Namespace)
	if !slices.Equal(job.dnsNames, []string{wantName}) || job.dnsPort != int(svc.Spec.Ports[0].Port) {
		t.Errorf("deploy/prometheus/prometheus.yml resolves %q port %d, want %s port %d", job.dnsNames, job.dnsPort, wantName, svc.Spec.Ports[0].Port)
	}
}

// checkRedis checks the in-cluster Redis of components/redis, or its
// absence with an external one.
func checkRedis(t *testing.T, r *rendered, gw *workload, redis string) {
	t.Helper()
	sts := r.statefulSets["acp-gateway-redis"]
	switch redis {
	case "", "external":
		if len(r.statefulSets) != 0 {
			t.Errorf("StatefulSets %v with no in-cluster Redis", slices.Collect(maps.Keys(r.statefulSets)))
		}
		return
	}
	if sts == nil {
		t.Fatal("no StatefulSet acp-gateway-redis")
	}
	secret := r.secrets["acp-gateway-redis"]
	if secret == nil {
		t.Fatal("no Secret acp-gateway-redis")
	}
	url := string(secret.Data["url"])
	if _, _, err := redisstore.ParseURL(url); err != nil {
		t.Errorf("Secret acp-gateway-redis url %q: %v", url, err)
	}
	m := regexp.MustCompile(`^redis://([^:/@]+):(\d+)/\d+$`).FindStringSubmatch(url)
	if m == nil {
		t.Fatalf("Secret acp-gateway-redis url %q: want redis://SERVICE:PORT/DB", url)
	}
	svc := r.services[m[1]]
	if svc == nil {
		t.Fatalf("Secret acp-gateway-redis url %q: no Service %s", url, m[1])
	}
	if sts.Spec.ServiceName != svc.Name {
		t.Errorf("StatefulSet serviceName %q, want %s", sts.Spec.ServiceName, svc.Name)
	}
	port, _ := strconv.Atoi(m[2])
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == int32(port) }) {
		t.Errorf("Secret acp-gateway-redis url %q: Service %s has no port %d", url, svc.Name, port)
	}
	if ws := r.selected(labels.SelectorFromSet(svc.Spec.Selector)); len(ws) != 1 || ws[0].name != sts.Name {
		t.Errorf("Service %s selects %v, want StatefulSet %s", svc.Name, ws, sts.Name)
	}
	// Only the gateway reaches it.
	admitted := false
	for name, np := range r.policies {
		if !selector(t, name, &np.Spec.PodSelector).Matches(labels.Set(sts.Spec.Template.Labels)) {
			continue
		}
		for _, rule := range np.Spec.Ingress {
			if len(rule.From) == 0 {
				t.Errorf("NetworkPolicy %s admits anyone to Redis", name)
			}
			for _, from := range rule.From {
				if from.PodSelector == nil || from.NamespaceSelector != nil || from.IPBlock != nil {
					t.Errorf("NetworkPolicy %s admits more than pods of its namespace to Redis", name)
					continue
				}
				ws := r.selected(selector(t, name, from.PodSelector))
				if len(ws) != 1 || ws[0].name != gw.name {
					t.Errorf("NetworkPolicy %s admits %v to Redis, want the gateway", name, ws)
				}
				admitted = true
			}
		}
	}
	if !admitted {
		t.Error("no NetworkPolicy admits the gateway to Redis")
	}
}

// runServe runs the real binary with the gateway container's args and
// --config file, the variables the kubelet would expand filled in. Only
// what needs the cluster is replaced, with flags that win over the file:
// the addresses (127.0.0.1, any port), the store (memory:), the token
// file and the replica secret (the operator's Secrets), and the workspace
// root and the agents' homes (the container's volume). It must serve the probes' paths and
// metrics, demand a token, run a turn of an agent in its sandbox, and exit
// cleanly on SIGTERM (that the grace period covers the shutdown's own
// bounds is checked from the manifest).
func runServe(t *testing.T, gw *workload, s serveSettings) {
	t.Helper()
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(config, s.config, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokens, []byte("# TOKEN USER\ndeploy-test-token tester\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "replica-secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("0123456789abcdef", 4)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A pod's address, which the replicated overlays advertise: other
	// replicas forward requests to it by that name.
	const podIP = "10.0.0.7"
	env := map[string]string{"POD_IP": podIP}
	var args []string
	for _, a := range s.args {
		switch {
		case strings.HasPrefix(a, "--config="):
			a = "--config=" + config
		case strings.HasPrefix(a, "--replica-secret-file="):
			a = "--replica-secret-file=" + secret
		case strings.HasPrefix(a, "--store-file="):
			continue // the store is memory: below
		}
		args = append(args, regexp.MustCompile(`\$\((\w+)\)`).ReplaceAllStringFunc(a, func(v string) string {
			return env[v[2:len(v)-1]]
		}))
	}
	args = append(args, "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--store=memory:", "--auth-tokens="+tokens,
		"--workspace-root="+filepath.Join(dir, "workspace"), "--sandbox-homes="+filepath.Join(dir, "homes"))
	g := startGateway(t, dir, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := &gw.template.Spec.Containers[0]
	for _, u := range []string{g.base + c.ReadinessProbe.HTTPGet.Path, g.base + c.LivenessProbe.HTTPGet.Path, g.metrics + "/metrics"} {
		if code, body, err := get(ctx, u); err != nil || code != http.StatusOK {
			t.Errorf("GET %s: %d %v %.200s", u, code, err, body)
		}
	}
	// The kubelet probes by the pod's address.
	for _, path := range []string{c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path, c.StartupProbe.HTTPGet.Path} {
		if code := status(ctx, t, http.MethodGet, g.base+path, podIP+":8080", ""); code != http.StatusOK {
			t.Errorf("GET %s with Host %s:8080, as the kubelet probes: %d", path, podIP, code)
		}
	}
	list := g.base + "/acp.v2.SessionService/ListSessions"
	for token, want := range map[string]int{"": http.StatusUnauthorized, "deploy-test-token": http.StatusOK} {
		if code := status(ctx, t, http.MethodPost, list, "", token); code != want {
			t.Errorf("ListSessions with token %q: %d, want %d", token, code, want)
		}
	}
	// Clients reach the Service by its names, replicas each other by the
	// address they advertise; a name rebound to the gateway is refused.
	hosts := map[string]int{"acp-gateway:8080": http.StatusOK, "acp-gateway.acp-gateway.svc.cluster.local:8080": http.StatusOK,
		"rebind.attacker.example:8080": http.StatusForbidden}
	if s.get("advertise") != "" {
		hosts[podIP+":8080"] = http.StatusOK
	}
	for host, want := range hosts {
		if code := status(ctx, t, http.MethodPost, list, host, "deploy-test-token"); code != want {
			t.Errorf("ListSessions with Host %s: %d, want %d", host, code, want)
		}
	}
	sandboxedTurn(t, g, s, dir)
	if err := g.stop(t); err != nil {
		t.Errorf("acp-gateway serve after SIGTERM: %v\n%s", err, g.output())
	}
}

// status sends a request to u (an RPC: a Connect JSON one) with the Host
// header host and the bearer token, each unless empty, and returns its
// status.
func status(ctx context.Context, t *testing.T, method, u, host, token string) int {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader("{}")
	}
	req, _ := http.NewRequestWithContext(ctx, method, u, body)
	req.Header.Set("Content-Type", "application/json")
	if host != "" {
		req.Host = host
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// sandboxedTurn runs a turn of the demo agent for the token's user in a
// directory of theirs under the workspace root, and checks that the agent
// ran in its sandbox: the gateway says so at start and in its metrics, with
// no per-agent cgroup limit (config.yaml sets none), and the agent got its
// user's home under the homes directory, which only the sandbox makes.
// (This machine runs bubblewrap, so it does not show that a pod can: that
// is what checkSandboxContext checks the container's securityContext for.)
func sandboxedTurn(t *testing.T, g *gateway, s serveSettings, dir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(s.values["agent"]) > 0 {
		t.Logf("the config names agents of its own; no demo turn")
		return
	}
	if !strings.Contains(g.output(), `"msg":"agents confined","sandbox":"bwrap"`) {
		t.Errorf("the gateway did not log agents confined with sandbox bwrap:\n%s", g.output())
	}
	cwd := filepath.Join(dir, "workspace", "tester", "try")
	if err := os.MkdirAll(cwd, 0o700); err != nil {
		t.Fatal(err)
	}
	try := exec.CommandContext(ctx, gatewayBinary(t), "try", "--json", "--url", g.base, "--token", "deploy-test-token", "--cwd", cwd)
	out, err := try.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"turnEnded"`) {
		t.Fatalf("acp-gateway try, as the token's user, in %s: %v\n%s\ngateway:\n%s", cwd, err, out, g.output())
	}
	if fi, err := os.Stat(filepath.Join(dir, "homes", "tester")); err != nil || !fi.IsDir() {
		t.Errorf("the agent's home, the homes directory's tester: %v", err)
	}
	_, body, err := get(ctx, g.metrics+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), `acp_gateway_agent_sandbox_info{mode="bwrap"} 1`) {
		t.Error(`/metrics: no acp_gateway_agent_sandbox_info{mode="bwrap"} 1`)
	}
	for _, res := range []string{"memory_bytes", "pids", "cpu"} {
		if strings.Contains(string(body), `acp_gateway_agent_limit{resource="`+res+`"}`) {
			t.Errorf("/metrics: acp_gateway_agent_limit{resource=%q}, which config.yaml leaves unset", res)
		}
	}
}

// scrapeJob is deploy/prometheus/prometheus.yml's job, as the test reads it.
type scrapeJob struct {
	name, metricsPath string
	dnsNames          []string
	dnsPort           int
}

func prometheusJob(t *testing.T) scrapeJob {
	t.Helper()
	var cfg struct {
		ScrapeConfigs []struct {
			JobName     string `yaml:"job_name"`
			MetricsPath string `yaml:"metrics_path"`
			DNSSD       []struct {
				Names []string `yaml:"names"`
				Type  string   `yaml:"type"`
				Port  int      `yaml:"port"`
			} `yaml:"dns_sd_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, filepath.Join("prometheus", "prometheus.yml"), &cfg)
	if len(cfg.ScrapeConfigs) != 1 || len(cfg.ScrapeConfigs[0].DNSSD) != 1 {
		t.Fatalf("deploy/prometheus/prometheus.yml: want one scrape job with one dns_sd_configs entry")
	}
	sc := cfg.ScrapeConfigs[0]
	job := scrapeJob{name: sc.JobName, metricsPath: sc.MetricsPath, dnsNames: sc.DNSSD[0].Names, dnsPort: sc.DNSSD[0].Port}
	if job.metricsPath == "" {
		job.metricsPath = "/metrics"
	}
	if job.name != gatewayName {
		t.Errorf("deploy/prometheus/prometheus.yml: job %q, want %q", job.name, gatewayName)
	}
	return job
}
