package main

// `go run . fixtures <dir>` writes golden fixtures for the protobuf decoder: for each object,
// <name>.pb (what kube-apiserver sends for `Accept: application/vnd.kubernetes.protobuf`: the
// magic "k8s\x00", then a runtime.Unknown whose typeMeta names apiVersion and kind and whose raw
// is the object's message) and <name>.json (what it sends for `application/json`), both from
// apimachinery's own serializers behind the codec factory's versioning encoder, as the
// apiserver's handlers use them. watch-pods.pb and watch-pods.jsonl are a watch stream encoded
// as the apiserver's watch handler does (k8s.io/apiserver/pkg/endpoints/handlers/watch.go and
// response.go): see writeWatch.

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/framer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"
)

// Fixed times, so the fixtures are reproducible.
var (
	t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	t1 = t0.Add(90 * time.Second)
)

func at(t time.Time) metav1.Time { return metav1.NewTime(t) }

type encoders struct {
	codecs                    serializer.CodecFactory
	proto, protoRaw, jsonText runtime.Serializer
}

func newEncoders(s *runtime.Scheme) *encoders {
	return &encoders{
		codecs:   serializer.NewCodecFactory(s),
		proto:    protobuf.NewSerializer(s, s),
		protoRaw: protobuf.NewRawSerializer(s, s),
		jsonText: jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, s, s, jsonserializer.SerializerOptions{}),
	}
}

// encode writes obj with serializer ser for group version gv, as a handler does.
func (e *encoders) encode(ser runtime.Serializer, gv schema.GroupVersion, obj runtime.Object) []byte {
	var b bytes.Buffer
	must(e.codecs.EncoderForVersion(ser, gv).Encode(obj, &b))
	return b.Bytes()
}

func write(dir, name string, data []byte) {
	must(os.WriteFile(filepath.Join(dir, name), data, 0o644))
}

func writeFixtures(s *runtime.Scheme, dir string) {
	e := newEncoders(s)
	for _, f := range fixtures() {
		write(dir, f.name+".pb", e.encode(e.proto, f.gv, f.obj))
		write(dir, f.name+".json", e.encode(e.jsonText, f.gv, f.obj))
	}
	writeWatch(e, dir)
}

type fixture struct {
	name string
	gv   schema.GroupVersion
	obj  runtime.Object
}

func fixtures() []fixture {
	core := corev1.SchemeGroupVersion
	pods := &corev1.PodList{
		ListMeta: metav1.ListMeta{ResourceVersion: "1042", Continue: "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTA0Mn0"},
		Items:    []corev1.Pod{*richPod(), *minimalPod("web-1", "1040"), *minimalPod("web-2", "1041")},
	}
	return []fixture{
		{"pod", core, richPod()},
		{"pod-minimal", core, minimalPod("bare", "7")},
		{"podlist", core, pods},
		{"deployment", appsv1.SchemeGroupVersion, deployment()},
		{"replicaset", appsv1.SchemeGroupVersion, replicaSet()},
		{"service", core, service()},
		{"endpointslice", discoveryv1.SchemeGroupVersion, endpointSlice()},
		{"configmap", core, configMap()},
		{"secret", core, secret()},
		{"node", core, node()},
		{"namespace", core, namespace()},
		{"event", eventsv1.SchemeGroupVersion, event()},
		{"lease", coordinationv1.SchemeGroupVersion, lease()},
		{"job", batchv1.SchemeGroupVersion, job()},
		{"crd", apiextensionsv1.SchemeGroupVersion, crd()},
		{"apiservice", apiregistrationv1.SchemeGroupVersion, apiService()},
		{"status", core, goneStatus()},
		{"partialobjectmetadatalist", metav1.SchemeGroupVersion, partialList()},
	}
}

// writeWatch writes a watch of pods. kube-apiserver frames each event with protobuf's
// LengthDelimitedFramer (a 4-byte big-endian length, then the frame) and encodes the
// metav1.WatchEvent with the *raw* protobuf serializer (its StreamSerializer: no magic, no
// Unknown), while the event's object (RawExtension.raw) is encoded with the regular one (magic
// and Unknown). For JSON both are the JSON serializer and frames are JSON texts, one a line.
func writeWatch(e *encoders, dir string) {
	gv := corev1.SchemeGroupVersion
	added := minimalPod("web-0", "2001")
	modified := richPod()
	modified.ResourceVersion = "2002"
	deleted := minimalPod("web-0", "2003")
	deleted.DeletionTimestamp = ptr.To(at(t1))
	deleted.DeletionGracePeriodSeconds = ptr.To[int64](0)
	bookmark := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		ResourceVersion: "2004",
		Annotations:     map[string]string{metav1.InitialEventsAnnotationKey: "true"},
	}}
	events := []watch.Event{
		{Type: watch.Added, Object: added},
		{Type: watch.Modified, Object: modified},
		{Type: watch.Deleted, Object: deleted},
		{Type: watch.Bookmark, Object: bookmark},
		{Type: watch.Error, Object: goneStatus()},
	}
	for _, format := range []struct {
		name            string
		embedded, event runtime.Serializer
		frame           func(io.Writer) io.Writer
	}{
		{"watch-pods.pb", e.proto, e.protoRaw, framer.NewLengthDelimitedFrameWriter},
		// The JSON serializer ends each text with a newline.
		{"watch-pods.jsonl", e.jsonText, e.jsonText, func(w io.Writer) io.Writer { return w }},
	} {
		var out bytes.Buffer
		w := format.frame(&out)
		for _, ev := range events {
			raw := e.encode(format.embedded, gv, ev.Object)
			outEvent := &metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: raw}}
			_, err := w.Write(e.encode(format.event, gv, outEvent))
			must(err)
		}
		write(dir, format.name, out.Bytes())
	}
}

func goneStatus() *metav1.Status {
	return &metav1.Status{
		Status:  metav1.StatusFailure,
		Message: "too old resource version: 1000 (2000)",
		Reason:  metav1.StatusReasonExpired,
		Code:    410,
	}
}

func objectMeta(name, rv string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              name,
		Namespace:         "default",
		UID:               "3b2c6e0a-4f1d-4c36-9a57-0d8c5e1f2a01",
		ResourceVersion:   rv,
		Generation:        0, // zero, omitempty: JSON leaves it out
		CreationTimestamp: at(t0),
	}
}

func minimalPod(name, rv string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: objectMeta(name, rv),
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
		},
	}
}

func richPod() *corev1.Pod {
	meta := objectMeta("web-0", "1039")
	meta.GenerateName = "web-"
	meta.Generation = 1
	meta.Labels = map[string]string{"app": "web", "pod-template-hash": "5d9c7b8f6"}
	meta.Annotations = map[string]string{"example.com/note": "", "kubectl.kubernetes.io/restartedAt": "2026-11-30T11:00:00Z"}
	meta.Finalizers = []string{"example.com/cleanup"}
	meta.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d9c7b8f6",
		UID: "aa1b0c2d-0000-4000-8000-000000000001", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false),
	}}
	meta.ManagedFields = []metav1.ManagedFieldsEntry{{
		Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: "v1", Time: ptr.To(at(t0)), FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{}}}}}`)},
	}, {
		Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		Time: ptr.To(at(t1)), FieldsType: "FieldsV1", Subresource: "status",
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:phase":{}}}`)},
	}}
	sizeLimit := resource.MustParse("64Mi")
	probe := &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/healthz", Port: intstr.FromString("http"), Scheme: corev1.URISchemeHTTP,
		}},
		InitialDelaySeconds: 0, // zero, omitempty
		PeriodSeconds:       10,
		TimeoutSeconds:      1,
		SuccessThreshold:    1,
		FailureThreshold:    3,
	}
	return &corev1.Pod{
		ObjectMeta: meta,
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{
				Name: "init", Image: "registry.example/init:1", Command: []string{"sh", "-c", "true"},
				Args:                     []string{}, // empty, not nil: both leave JSON and protobuf
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				ImagePullPolicy:          corev1.PullIfNotPresent,
			}},
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "registry.example/app:1",
				Ports: []corev1.ContainerPort{
					{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
					{ContainerPort: 9090, Protocol: corev1.ProtocolUDP, HostPort: 0},
				},
				Env: []corev1.EnvVar{
					{Name: "PLAIN", Value: "v"},
					{Name: "EMPTY", Value: ""},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
					{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "token", Optional: ptr.To(false),
					}}},
					{Name: "LIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
						ContainerName: "app", Resource: "limits.memory", Divisor: resource.MustParse("1Mi"),
					}}},
				},
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.1"), corev1.ResourceMemory: resource.MustParse("128974848")},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "config", MountPath: "/etc/app", ReadOnly: true},
					{Name: "scratch", MountPath: "/tmp", ReadOnly: false},
				},
				LivenessProbe: probe,
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 5,
				},
				SecurityContext: &corev1.SecurityContext{
					RunAsUser:                ptr.To[int64](0),
					RunAsNonRoot:             ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				ImagePullPolicy:          corev1.PullIfNotPresent,
				Stdin:                    false,
			}, {
				Name: "sidecar", Image: "registry.example/sidecar:2",
				Command: []string{"/sidecar"},
			}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"},
					Items:                []corev1.KeyToPath{{Key: "app.yaml", Path: "app.yaml", Mode: ptr.To[int32](0o400)}},
					DefaultMode:          ptr.To[int32](0o644),
				}}},
				{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName: "creds", DefaultMode: ptr.To[int32](0o420), Optional: ptr.To(false),
				}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
					Medium: corev1.StorageMediumMemory, SizeLimit: &sizeLimit,
				}}},
				{Name: "empty", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					DefaultMode: ptr.To[int32](0o644),
					Sources: []corev1.VolumeProjection{
						{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: ptr.To[int64](3607), Path: "token"}},
						{ConfigMap: &corev1.ConfigMapProjection{
							LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
							Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
						}},
						{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
							Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
						}}}},
					},
				}}},
			},
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			DNSPolicy:                     corev1.DNSClusterFirst,
			NodeSelector:                  map[string]string{"kubernetes.io/os": "linux"},
			ServiceAccountName:            "web",
			AutomountServiceAccountToken:  ptr.To(false),
			NodeName:                      "node-a",
			HostNetwork:                   false,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](0), FSGroup: ptr.To[int64](2000),
				SupplementalGroups: []int64{0, 3000},
				SeccompProfile:     &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Affinity: &corev1.Affinity{
				NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-a", "zone-b"},
					}}}},
				}},
				PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
					Weight: 100,
					PodAffinityTerm: corev1.PodAffinityTerm{
						LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
						TopologyKey:   "kubernetes.io/hostname",
					},
				}}},
			},
			SchedulerName: "default-scheduler",
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "web", Effect: corev1.TaintEffectNoSchedule},
			},
			Priority:           ptr.To[int32](0),
			EnableServiceLinks: ptr.To(true),
			PreemptionPolicy:   ptr.To(corev1.PreemptLowerPriority),
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: at(t0)},
				{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastProbeTime: metav1.Time{}, LastTransitionTime: at(t1),
					Reason: "ContainersNotReady", Message: "containers with unready status: [app]"},
			},
			HostIP:    "10.0.0.11",
			HostIPs:   []corev1.HostIP{{IP: "10.0.0.11"}},
			PodIP:     "10.244.1.7",
			PodIPs:    []corev1.PodIP{{IP: "10.244.1.7"}, {IP: "fd00::7"}},
			StartTime: ptr.To(at(t0)),
			InitContainerStatuses: []corev1.ContainerStatus{{
				Name: "init", Ready: true, RestartCount: 0, Image: "registry.example/init:1", ImageID: "registry.example/init@sha256:00",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 0, Reason: "Completed", StartedAt: at(t0), FinishedAt: at(t0.Add(2 * time.Second)), ContainerID: "containerd://init",
				}},
			}},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "app", Ready: false, RestartCount: 2, Image: "registry.example/app:1", ImageID: "registry.example/app@sha256:01",
				ContainerID: "containerd://app", Started: ptr.To(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at(t1)}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 137, Signal: 9, Reason: "OOMKilled", StartedAt: at(t0), FinishedAt: at(t1),
				}},
				AllocatedResources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			}, {
				Name: "sidecar", Ready: true, Image: "registry.example/sidecar:2", ImageID: "",
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}},
			}},
			QOSClass: corev1.PodQOSBurstable,
		},
	}
}

func podTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "registry.example/app:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
		}}},
	}
}

func deployment() *appsv1.Deployment {
	meta := objectMeta("web", "900")
	meta.Generation = 3
	meta.Annotations = map[string]string{"deployment.kubernetes.io/revision": "2"}
	maxSurge := intstr.FromString("25%")
	maxUnavailable := intstr.FromInt32(0)
	return &appsv1.Deployment{
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{
				MatchLabels:      map[string]string{"app": "web"},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"db"}}},
			},
			Template: podTemplate(),
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &maxSurge, MaxUnavailable: &maxUnavailable},
			},
			MinReadySeconds:         0,
			RevisionHistoryLimit:    ptr.To[int32](10),
			Paused:                  false,
			ProgressDeadlineSeconds: ptr.To[int32](600),
		},
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: 3, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 2, UnavailableReplicas: 1,
			TerminatingReplicas: ptr.To[int32](0),
			Conditions: []appsv1.DeploymentCondition{{
				Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, LastUpdateTime: at(t0), LastTransitionTime: at(t0),
				Reason: "MinimumReplicasAvailable", Message: "Deployment has minimum availability.",
			}},
		},
	}
}

func replicaSet() *appsv1.ReplicaSet {
	meta := objectMeta("web-5d9c7b8f6", "901")
	meta.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "aa1b0c2d-0000-4000-8000-000000000000", Controller: ptr.To(true)}}
	return &appsv1.ReplicaSet{
		ObjectMeta: meta,
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: podTemplate(),
		},
		Status: appsv1.ReplicaSetStatus{Replicas: 0, ObservedGeneration: 1},
	}
}

func service() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: objectMeta("web", "950"),
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeNodePort,
			Selector:   map[string]string{"app": "web"},
			ClusterIP:  "10.96.0.20",
			ClusterIPs: []string{"10.96.0.20", "fd00:10:96::20"},
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http"), NodePort: 30080},
				{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9090, TargetPort: intstr.FromInt32(9090), AppProtocol: ptr.To("http")},
			},
			SessionAffinity:          corev1.ServiceAffinityNone,
			IPFamilies:               []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			IPFamilyPolicy:           ptr.To(corev1.IPFamilyPolicyPreferDualStack),
			ExternalTrafficPolicy:    corev1.ServiceExternalTrafficPolicyCluster,
			InternalTrafficPolicy:    ptr.To(corev1.ServiceInternalTrafficPolicyCluster),
			PublishNotReadyAddresses: false,
		},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{}},
	}
}

func endpointSlice() *discoveryv1.EndpointSlice {
	meta := objectMeta("web-abc12", "960")
	meta.Labels = map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  meta,
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.244.1.7"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To("node-a"),
			Zone:       ptr.To("zone-a"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-0", UID: "3b2c6e0a-4f1d-4c36-9a57-0d8c5e1f2a01"},
			Hints:      &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}},
		}, {
			Addresses:  []string{"10.244.2.9"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)},
		}},
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)},
			{Name: ptr.To(""), Port: ptr.To[int32](0)},
		},
	}
}

func configMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: objectMeta("web-config", "970"),
		Data:       map[string]string{"app.yaml": "listen: 8080\n", "empty": ""},
		BinaryData: map[string][]byte{"logo.png": {0x89, 'P', 'N', 'G', 0, 0xff}, "nothing": {}},
		Immutable:  ptr.To(false),
	}
}

func secret() *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: objectMeta("creds", "980"),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"token": []byte("s3cr3t"), "binary": {0, 1, 2, 0xfe}, "empty": {}},
		StringData: map[string]string{},
	}
}

func node() *corev1.Node {
	meta := objectMeta("node-a", "990")
	meta.Namespace = ""
	meta.Labels = map[string]string{"kubernetes.io/hostname": "node-a", "kubernetes.io/os": "linux"}
	return &corev1.Node{
		ObjectMeta: meta,
		Spec: corev1.NodeSpec{
			PodCIDR:       "10.244.1.0/24",
			PodCIDRs:      []string{"10.244.1.0/24"},
			Taints:        []corev1.Taint{{Key: "dedicated", Value: "web", Effect: corev1.TaintEffectNoSchedule, TimeAdded: ptr.To(at(t0))}},
			Unschedulable: false,
		},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16393220Ki"),
				corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("100G"),
				"hugepages-2Mi": resource.MustParse("0"),
			},
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("3800m"), corev1.ResourceMemory: resource.MustParse("15.5Gi"),
				corev1.ResourcePods: resource.MustParse("110"),
			},
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: at(t1), LastTransitionTime: at(t0), Reason: "KubeletReady", Message: "kubelet is posting ready status"},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: at(t1), LastTransitionTime: at(t0), Reason: "KubeletHasSufficientMemory"},
			},
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.11"}, {Type: corev1.NodeHostName, Address: "node-a"}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID: "m", SystemUUID: "u", BootID: "b", KernelVersion: "6.8.0", OSImage: "Linux", ContainerRuntimeVersion: "containerd://2.1.0",
				KubeletVersion: "v1.37.2", OperatingSystem: "linux", Architecture: "amd64",
			},
			Images: []corev1.ContainerImage{{Names: []string{"registry.example/app@sha256:01", "registry.example/app:1"}, SizeBytes: 12345678}},
		},
	}
}

func namespace() *corev1.Namespace {
	meta := objectMeta("team-a", "995")
	meta.Namespace = ""
	meta.Labels = map[string]string{"kubernetes.io/metadata.name": "team-a"}
	return &corev1.Namespace{
		ObjectMeta: meta,
		Spec:       corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
		Status:     corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
	}
}

func event() *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta:          objectMeta("web-0.18a2b3c4d5e6f708", "1001"),
		EventTime:           metav1.NewMicroTime(t0.Add(123456 * time.Microsecond)),
		Series:              &eventsv1.EventSeries{Count: 4, LastObservedTime: metav1.NewMicroTime(t1.Add(7 * time.Microsecond))},
		ReportingController: "kubelet",
		ReportingInstance:   "kubelet-node-a",
		Action:              "Pulling",
		Reason:              "BackOff",
		Regarding:           corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-0", APIVersion: "v1", FieldPath: "spec.containers{app}"},
		Related:             &corev1.ObjectReference{Kind: "Node", Name: "node-a"},
		Note:                "Back-off restarting failed container",
		Type:                corev1.EventTypeWarning,
		DeprecatedSource:    corev1.EventSource{},
		DeprecatedCount:     0,
	}
}

func lease() *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: objectMeta("kube-controller-manager", "1002"),
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("node-a_1b2c3d"),
			LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime:          ptr.To(metav1.NewMicroTime(t0.Add(1 * time.Microsecond))),
			RenewTime:            ptr.To(metav1.NewMicroTime(t1.Add(999999 * time.Microsecond))),
			LeaseTransitions:     ptr.To[int32](0),
		},
	}
}

func job() *batchv1.Job {
	tmpl := podTemplate()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{
		ObjectMeta: objectMeta("backup", "1003"),
		Spec: batchv1.JobSpec{
			Parallelism:           ptr.To[int32](2),
			Completions:           ptr.To[int32](4),
			ActiveDeadlineSeconds: ptr.To[int64](3600),
			BackoffLimit:          ptr.To[int32](6),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					ContainerName: ptr.To("app"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1, 42},
				}},
				{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{
					Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				}}},
			}},
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"batch.kubernetes.io/controller-uid": "c0ffee"}},
			ManualSelector: ptr.To(false),
			Template:       tmpl,
			CompletionMode: ptr.To(batchv1.NonIndexedCompletion),
			Suspend:        ptr.To(false),
		},
		Status: batchv1.JobStatus{
			StartTime: ptr.To(at(t0)), Active: 2, Succeeded: 1, Failed: 0,
			Ready:                   ptr.To[int32](2),
			Terminating:             ptr.To[int32](0),
			UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{Succeeded: []types.UID{"p1"}},
		},
	}
}

func crd() *apiextensionsv1.CustomResourceDefinition {
	meta := objectMeta("widgets.stable.example.com", "1004")
	meta.Namespace = ""
	str := apiextensionsv1.JSONSchemaProps{Type: "string", MinLength: ptr.To[int64](1), Pattern: "^[a-z]+$"}
	schema := &apiextensionsv1.JSONSchemaProps{
		Type:        "object",
		Description: "A widget.",
		Required:    []string{"spec"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"spec": {
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"size":     {Type: "integer", Format: "int32", Minimum: ptr.To(1.0), Maximum: ptr.To(100.5), ExclusiveMaximum: true, Default: &apiextensionsv1.JSON{Raw: []byte(`3`)}},
					"colour":   {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"red"`)}, {Raw: []byte(`"blue"`)}}, Default: &apiextensionsv1.JSON{Raw: []byte(`"red"`)}},
					"tags":     {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &str}, XListType: ptr.To("set"), MaxItems: ptr.To[int64](10)},
					"tuple":    {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{JSONSchemas: []apiextensionsv1.JSONSchemaProps{str, {Type: "integer"}}}},
					"labels":   {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &str}},
					"open":     {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true}},
					"closed":   {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: false}},
					"port":     {XIntOrString: true, AnyOf: []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}}},
					"raw":      {Type: "object", XPreserveUnknownFields: ptr.To(true), XEmbeddedResource: false, Nullable: true},
					"settings": {Type: "object", Default: &apiextensionsv1.JSON{Raw: []byte(`{"a":[1,true,null]}`)}, XPreserveUnknownFields: ptr.To(false)},
					"items": {Type: "array", XListType: ptr.To("map"), XListMapKeys: []string{"name"}, Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", Required: []string{"name"},
						Properties: map[string]apiextensionsv1.JSONSchemaProps{"name": str, "weight": {Type: "number", MultipleOf: ptr.To(0.25)}},
					}}},
				},
				XValidations: apiextensionsv1.ValidationRules{{Rule: "self.size <= 50 || self.colour == 'red'", Message: "big widgets are red", Reason: ptr.To(apiextensionsv1.FieldValueInvalid), FieldPath: ".size", OptionalOldSelf: ptr.To(false)}},
				Dependencies: apiextensionsv1.JSONSchemaDependencies{
					"colour": {Property: []string{"size"}},
					"tuple":  {Schema: &apiextensionsv1.JSONSchemaProps{Required: []string{"tags"}}},
				},
			},
			"status": {Type: "object", XPreserveUnknownFields: ptr.To(true)},
		},
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: meta,
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "stable.example.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList", ShortNames: []string{"wd"}, Categories: []string{"all"},
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true, Deprecated: false,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: schema},
				Subresources: &apiextensionsv1.CustomResourceSubresources{
					Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
					Scale:  &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.size", StatusReplicasPath: ".status.size"},
				},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{{Name: "Size", Type: "integer", JSONPath: ".spec.size", Priority: 0}},
			}, {
				Name: "v1beta1", Served: false, Storage: false, Deprecated: true, DeprecationWarning: ptr.To("use v1"),
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}},
			}},
			Conversion:            &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter},
			PreserveUnknownFields: false,
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{
			Conditions: []apiextensionsv1.CustomResourceDefinitionCondition{{
				Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue, LastTransitionTime: at(t0), Reason: "InitialNamesAccepted",
			}},
			AcceptedNames:  apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget"},
			StoredVersions: []string{"v1"},
		},
	}
}

func apiService() *apiregistrationv1.APIService {
	meta := objectMeta("v1beta1.metrics.k8s.io", "1005")
	meta.Namespace = ""
	return &apiregistrationv1.APIService{
		ObjectMeta: meta,
		Spec: apiregistrationv1.APIServiceSpec{
			Service:               &apiregistrationv1.ServiceReference{Namespace: "kube-system", Name: "metrics-server", Port: ptr.To[int32](443)},
			Group:                 "metrics.k8s.io",
			Version:               "v1beta1",
			InsecureSkipTLSVerify: true,
			CABundle:              []byte{0x30, 0x82, 0x01, 0x0a},
			GroupPriorityMinimum:  100,
			VersionPriority:       0,
		},
		Status: apiregistrationv1.APIServiceStatus{Conditions: []apiregistrationv1.APIServiceCondition{{
			Type: apiregistrationv1.Available, Status: apiregistrationv1.ConditionFalse, LastTransitionTime: at(t0),
			Reason: "FailedDiscoveryCheck", Message: "failing or missing response",
		}}},
	}
}

func partialList() *metav1.PartialObjectMetadataList {
	a := objectMeta("web-0", "1100")
	a.Labels = map[string]string{"app": "web"}
	b := objectMeta("web-1", "1101")
	b.DeletionTimestamp = ptr.To(at(t1))
	item := func(m metav1.ObjectMeta) metav1.PartialObjectMetadata {
		return metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}, ObjectMeta: m}
	}
	return &metav1.PartialObjectMetadataList{
		ListMeta: metav1.ListMeta{ResourceVersion: "1102", RemainingItemCount: ptr.To[int64](0)},
		Items:    []metav1.PartialObjectMetadata{item(a), item(b)},
	}
}
