import sys, time, statistics, resource, onnxruntime as ort, numpy as np
u, reuse = sys.argv[1], sys.argv[2]=="1"
def rss(): return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])//1024
base=rss()
o=ort.SessionOptions(); o.enable_mem_reuse=reuse
a=time.perf_counter(); s=ort.InferenceSession(u,o,providers=["CPUExecutionProvider"]); load=(time.perf_counter()-a)*1e3
loads=[]
for _ in range(5):
    a=time.perf_counter(); ort.InferenceSession(u,o,providers=["CPUExecutionProvider"]); loads.append((time.perf_counter()-a)*1e3)
feeds={}
T={"tensor(float)":np.float32,"tensor(int64)":np.int64,"tensor(int32)":np.int32}
for i in s.get_inputs():
    shape=[d if isinstance(d,int) else (1 if k==0 else 32) for k,d in enumerate(i.shape)]
    feeds[i.name]=(np.random.default_rng(0).standard_normal(shape)).astype(T[i.type]) if T[i.type]==np.float32 else np.ones(shape,T[i.type])
xs=[]
for _ in range(30):
    a=time.perf_counter(); s.run(None,feeds); xs.append((time.perf_counter()-a)*1e3)
peak=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss//1024
print(f"{ort.__version__} {u.split('/')[-1][:22]:22s} reuse={int(reuse)} load {statistics.median(loads):6.1f} ms  run {statistics.median(xs):7.3f} ms  peak-base {peak-base} MB")
