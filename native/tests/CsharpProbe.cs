// CsharpProbe.cs - the C ABI from C# (mono), as a Unity script would use it (tests/test_native.py):
//   mono csharp_probe.exe BUNDLE_DIR MODEL ORT_LIBRARY
// Opens the bundle from manifest bytes held in a byte[], lists models and signatures, opens MODEL's
// blob from a pinned byte[], prints its recipe, creates and releases a session, then provokes each
// error status it can from managed code. One "key: value" line per fact; exit 0 when all went as
// expected.
using System;
using System.IO;
using System.Runtime.InteropServices;
using OnnxCooker;

static class CsharpProbe
{
    static int failures;

    static void Expect(string what, Status got, Status want, Error err)
    {
        Console.WriteLine("status " + what + ": " + Native.Text(Native.oc_status_name(got)) +
                          (got == Status.Ok ? "" : " (" + err.Message + ")"));
        if (got != want) { failures++; Console.WriteLine("FAIL " + what + ": wanted " + want); }
    }

    static int Main(string[] args)
    {
        string dir = args[0], model = args[1], ortLibrary = args[2];
        byte[] manifest = File.ReadAllBytes(Path.Combine(dir, "manifest.json"));
        GCHandle manifestPin = GCHandle.Alloc(manifest, GCHandleType.Pinned);
        Error err = Error.Create();
        IntPtr bundle;
        Status s = Native.oc_bundle_open_manifest(manifestPin.AddrOfPinnedObject(), (UIntPtr)manifest.Length,
                                                  IntPtr.Zero, IntPtr.Zero, out bundle, ref err);
        manifestPin.Free();  // the bundle copied what it needs
        Expect("open manifest", s, Status.Ok, err);
        Console.WriteLine("platform: " + Native.Text(Native.oc_bundle_platform(bundle)));
        ulong count = (ulong)Native.oc_bundle_model_count(bundle);
        for (ulong i = 0; i < count; i++)
        {
            string name = Native.Text(Native.oc_bundle_model_name(bundle, (UIntPtr)i));
            for (int side = 0; side < 2; side++)
            {
                ulong n = (ulong)Native.oc_bundle_signature_count(bundle, name, side);
                for (ulong k = 0; k < n; k++)
                {
                    TensorInfo t;
                    Native.oc_bundle_signature(bundle, name, side, (UIntPtr)k, out t, ref err);
                    Console.WriteLine("signature: " + name + " " + (side == 1 ? "output " : "input ") +
                                      Native.Text(t.Name) + " " + Native.Text(t.Type) + " " + Native.Text(t.Shape));
                }
            }
        }

        // The blob from a byte[] (as a ScriptableObject would hold it), pinned while it is used.
        ulong listedSize;
        string file = Path.Combine(dir, Native.Text(Native.oc_bundle_model_file(bundle, model, out listedSize)));
        byte[] blobBytes = File.ReadAllBytes(file);
        Console.WriteLine("model file: " + Path.GetFileName(file) + " " + listedSize + " bytes, read " + blobBytes.Length);
        Console.WriteLine("unknown model file: " + (Native.oc_bundle_model_file(bundle, "no-such-model", out listedSize) == IntPtr.Zero) + " " + listedSize);
        GCHandle blobPin = GCHandle.Alloc(blobBytes, GCHandleType.Pinned);
        IntPtr blob;
        s = Native.oc_bundle_open_blob_memory(bundle, model, blobPin.AddrOfPinnedObject(), (UIntPtr)blobBytes.Length,
                                              out blob, ref err);
        Expect("open blob", s, Status.Ok, err);
        BlobInfo info;
        Native.oc_blob_get_info(blob, out info, ref err);
        Console.WriteLine("blob: " + Native.Text(info.Name) + " " + info.Format + " graph " + info.GraphSize +
                          " weights " + info.WeightsSize);
        ulong eps = (ulong)Native.oc_blob_ep_count(blob);
        for (ulong i = 0; i < eps; i++)
        {
            string ep = Native.Text(Native.oc_blob_ep_name(blob, (UIntPtr)i));
            ulong n = (ulong)Native.oc_blob_session_option_count(blob, ep);
            string options = "";
            for (ulong k = 0; k < n; k++)
            {
                IntPtr key, value;
                Native.oc_blob_session_option(blob, ep, (UIntPtr)k, out key, out value);
                options += " " + Native.Text(key) + "=" + Native.Text(value);
            }
            Console.WriteLine("recipe: " + ep + options);
        }

        IntPtr runtime;
        s = Native.oc_runtime_load(ortLibrary, out runtime, ref err);
        Expect("load onnxruntime", s, Status.Ok, err);
        Console.WriteLine("onnxruntime: " + Native.Text(Native.oc_runtime_version(runtime)));
        IntPtr session;
        LoadPath loadPath;
        s = Native.oc_session_create(runtime, blob, IntPtr.Zero, out session, out loadPath, ref err);
        Expect("create session", s, Status.Ok, err);
        Console.WriteLine("load path: " + Native.Text(Native.oc_load_path_name(loadPath)));
        Native.oc_session_release(runtime, session);  // the session first,
        byte[] refused = new byte[256];  // OC_REFUSED_MAX
        byte[] why = new byte[1024];
        s = Native.oc_session_create_reported(runtime, blob, IntPtr.Zero, IntPtr.Zero, out session, out loadPath, why,
                                              (UIntPtr)why.Length, refused, (UIntPtr)refused.Length, ref err);
        Expect("create session, reported", s, Status.Ok, err);
        Console.WriteLine("reported: " + Native.Text(Native.oc_load_path_name(loadPath)) + "; refused: [" +
                          System.Text.Encoding.UTF8.GetString(refused, 0, Array.IndexOf(refused, (byte)0)) + "]");
        Native.oc_session_release(runtime, session);

        // The engine's own call for the blob's preferred EP (a console's), through a delegate: first one
        // that counts its calls and appends, then one that fails.
        string preferred = Native.Text(Native.oc_blob_ep_name(blob, UIntPtr.Zero));
        int appended = 0;
        EpAppendFn append = (user, options, ep, keys, values, n, error) =>
        {
            appended++;
            Console.WriteLine("appender called: " + Native.Text(ep) + " with " + (ulong)n + " provider options" +
                              ((ulong)n > 0 ? " (" + Native.TextAt(keys, 0) + "=" + Native.TextAt(values, 0) + ")" : ""));
            return Status.Ok;
        };
        EpAppendFn refuse = (user, options, ep, keys, values, n, error) =>
        {
            Native.SetErrorMessage(error, "no devkit attached");
            return Status.SessionCreate;
        };
        Expect("set appender", Native.oc_runtime_set_ep_appender(runtime, preferred, append, IntPtr.Zero, ref err), Status.Ok, err);
        byte[] appenderEps = new byte[1024];
        s = Native.oc_session_create_on_devices(runtime, blob, IntPtr.Zero, IntPtr.Zero, out session, out loadPath,
                                                appenderEps, (UIntPtr)appenderEps.Length, ref err);
        Expect("session through the appender", s, Status.Ok, err);
        Console.WriteLine("appender eps: " + System.Text.Encoding.UTF8.GetString(appenderEps, 0, Array.IndexOf(appenderEps, (byte)0)) +
                          "; called " + appended);
        Native.oc_session_release(runtime, session);
        Expect("set a failing appender", Native.oc_runtime_set_ep_appender(runtime, preferred, refuse, IntPtr.Zero, ref err), Status.Ok, err);
        Expect("a failing appender", Native.oc_session_create(runtime, blob, IntPtr.Zero, out session, out loadPath, ref err),
               Status.SessionCreate, err);
        Expect("remove the appender", Native.oc_runtime_set_ep_appender(runtime, preferred, null, IntPtr.Zero, ref err), Status.Ok, err);
        Expect("the CPU EP's appender", Native.oc_runtime_set_ep_appender(runtime, "CPUExecutionProvider", append, IntPtr.Zero, ref err),
               Status.InvalidArgument, err);
        GC.KeepAlive(append);
        GC.KeepAlive(refuse);

        // Plugin EPs: the devices onnxruntime offers, a session by device policy, and the refusals.
        Console.WriteLine("plugin eps: " + Native.oc_runtime_has_plugin_eps(runtime));
        ulong deviceCount = (ulong)Native.oc_runtime_ep_device_count(runtime);
        for (ulong d = 0; d < deviceCount; d++)
        {
            EpDevice device;
            Expect("ep device", Native.oc_runtime_ep_device(runtime, (UIntPtr)d, out device, ref err), Status.Ok, err);
            Console.WriteLine("ep device: " + Native.Text(device.EpName) + " " + device.Type + " " + Native.Text(device.Vendor));
        }
        IntPtr policyName = Marshal.StringToHGlobalAnsi("prefer_cpu");
        Devices devices = new Devices { Policy = policyName };
        byte[] explanation = new byte[1024];
        s = Native.oc_session_create_on_devices(runtime, blob, IntPtr.Zero, ref devices, out session, out loadPath,
                                                explanation, (UIntPtr)explanation.Length, ref err);
        Expect("session by device policy", s, Status.Ok, err);
        Console.WriteLine("policy eps: " + System.Text.Encoding.UTF8.GetString(explanation, 0, Array.IndexOf(explanation, (byte)0)));
        Native.oc_session_release(runtime, session);
        Marshal.FreeHGlobal(policyName);
        IntPtr epName = Marshal.StringToHGlobalAnsi("NoSuchExecutionProvider");
        GCHandle pairsPin = GCHandle.Alloc(new DevicePair[] { new DevicePair { Ep = epName, Type = DeviceType.Gpu } }, GCHandleType.Pinned);
        devices = new Devices { Pairs = pairsPin.AddrOfPinnedObject(), PairCount = (UIntPtr)1 };
        Expect("a device nothing offers", Native.oc_session_create_on_devices(runtime, blob, IntPtr.Zero, ref devices, out session,
                                                                              out loadPath, null, UIntPtr.Zero, ref err), Status.SessionCreate, err);
        pairsPin.Free();
        Marshal.FreeHGlobal(epName);
        Expect("a missing EP library", Native.oc_runtime_register_ep_library(runtime, "missing", "/nonexistent/libep.so", ref err),
               Status.SessionCreate, err);
        Console.WriteLine("device policy: " + (Native.Text(Native.oc_blob_device_policy(blob)) ?? "none"));
        Native.oc_blob_close(blob);                     // then the blob,
        blobPin.Free();                                 // then the bytes it borrowed

        // Each error status managed code can provoke.
        IntPtr none;
        Expect("unknown model", Native.oc_bundle_open_blob(bundle, "no-such-model", out none, ref err), Status.UnknownModel, err);
        byte[] junk = System.Text.Encoding.ASCII.GetBytes("definitely not a blob, just some text");
        Expect("junk bytes", OpenBytes(junk, ref err), Status.NotABlob, err);
        byte[] cut = new byte[10];
        Array.Copy(blobBytes, cut, cut.Length);
        bool headerFirst = blobBytes[0] == 0x5E && blobBytes[1] == 0x2A && blobBytes[2] == 0x4D && blobBytes[3] == 0x18;
        // cut inside the header: "truncated"; cut inside an ORT graph that leads the blob: no header, not a blob
        Expect("truncated blob", OpenBytes(cut, ref err), headerFirst ? Status.Truncated : Status.NotABlob, err);
        byte[] damaged = (byte[])blobBytes.Clone();
        damaged[damaged.Length / 2] ^= 0x20;
        Expect("damaged blob", OpenNamed(bundle, model, damaged, ref err), Status.Checksum, err);
        byte[] badManifest = System.Text.Encoding.UTF8.GetBytes("{\"manifest_version\": 9}");
        GCHandle pin = GCHandle.Alloc(badManifest, GCHandleType.Pinned);
        IntPtr other;
        Expect("bad manifest", Native.oc_bundle_open_manifest(pin.AddrOfPinnedObject(), (UIntPtr)badManifest.Length,
                                                              IntPtr.Zero, IntPtr.Zero, out other, ref err), Status.Manifest, err);
        pin.Free();
        Expect("no onnxruntime", Native.oc_runtime_load("/nonexistent/libonnxruntime.so", out other, ref err), Status.RuntimeLoad, err);
        Expect("an empty library path", Native.oc_runtime_load("", out other, ref err), Status.InvalidArgument, err);
        Expect("null argument", Native.oc_blob_open_memory(IntPtr.Zero, (UIntPtr)5, IntPtr.Zero, out other, ref err), Status.InvalidArgument, err);
        Native.oc_runtime_release(runtime);
        Native.oc_bundle_close(bundle);
        Managed(dir, model, ortLibrary);
        Console.WriteLine(failures == 0 ? "ok" : failures + " failures");
        return failures == 0 ? 0 : 1;
    }

    // The managed layer: `using` owners, the manifest's blob from a byte[], a session, and an exception.
    static void Managed(string dir, string model, string ortLibrary)
    {
        using (Bundle bundle = Bundle.FromManifest(File.ReadAllBytes(Path.Combine(dir, "manifest.json"))))
        using (Runtime runtime = Runtime.Load(ortLibrary))
        {
            ulong size;
            string file = bundle.ModelFile(model, out size);
            using (Blob blob = bundle.OpenBlob(model, File.ReadAllBytes(Path.Combine(dir, file))))
            {
                Console.WriteLine("managed: " + bundle.Platform + " " + string.Join(",", bundle.Models).Length + " " + file +
                                  " inputs " + bundle.Signature(model, false).Length + " eps " +
                                  string.Join(",", blob.ExecutionProviders) + " model bytes " + blob.ModelBytes().Length +
                                  " weights bytes " + blob.WeightsBytes().Length);
                foreach (var dim in bundle.Dims(model, false, 0))
                    Console.WriteLine("managed first input dim: " + dim.Key + " " + (dim.Value ?? "-"));
                foreach (string ep in blob.ExecutionProviders)
                    foreach (var option in blob.ProviderOptions(ep))
                        Console.WriteLine("managed provider option: " + ep + " " + option.Key + "=" + option.Value);
                using (Session session = runtime.CreateSession(blob))
                    Console.WriteLine("managed session: " + session.LoadPath + " (" + session.Explanation + ") " +
                                      (session.Handle != IntPtr.Zero));
            }
            try
            {
                bundle.OpenBlob("no-such-model", new byte[] { 1, 2, 3 });
                failures++;
                Console.WriteLine("FAIL managed: an unknown model opened");
            }
            catch (OnnxCookerException e)
            {
                Console.WriteLine("managed exception: " + e.Status + " " + e.Message.Split(':')[0]);
            }
            Lifetimes(bundle, runtime, model, Path.Combine(dir, file), ortLibrary);
        }
    }

    // Unity's pattern: a `using` around the blob, the session kept in a field. The blob's Dispose
    // waits for the session (its bytes stay pinned, it stays open); likewise a Runtime's.
    static void Lifetimes(Bundle bundle, Runtime runtime, string model, string path, string ortLibrary)
    {
        Session kept;
        Blob blob;
        using (blob = bundle.OpenBlob(model, File.ReadAllBytes(path)))
            kept = runtime.CreateSession(blob, new[] { "CPUExecutionProvider" }, true, 1);
        bool open = blob.Handle != IntPtr.Zero, refusedNew = false;
        try { var unused = blob.Info; }
        catch (ObjectDisposedException) { refusedNew = true; }
        kept.Dispose();
        Console.WriteLine("blob disposed before its session: open " + open + ", refuses new use " + refusedNew +
                          ", closed with the session " + (blob.Handle == IntPtr.Zero) + "; session eps (" + kept.Explanation +
                          ") refused '" + kept.Refused + "'");
        Runtime other = Runtime.Load(ortLibrary);
        using (Blob again = bundle.OpenBlob(model, File.ReadAllBytes(path)))
        {
            Session s = other.CreateSession(again);
            other.Dispose();
            bool runtimeOpen = other.Handle != IntPtr.Zero;
            s.Dispose();
            Console.WriteLine("runtime disposed before its session: open " + runtimeOpen + ", released with it " +
                              (other.Handle == IntPtr.Zero));
        }
        foreach (string call in new[] { "Signature", "Dims", "null bytes" })
        {
            try
            {
                if (call == "Signature") bundle.Signature("no-such-model", false);
                else if (call == "Dims") bundle.Dims("no-such-model", false, 0);
                else bundle.OpenBlob(model, null);
                failures++;
                Console.WriteLine("FAIL managed: " + call + " of a mistake passed");
            }
            catch (OnnxCookerException e) { Console.WriteLine("managed " + call + ": " + e.Status); }
            catch (ArgumentNullException) { Console.WriteLine("managed " + call + ": ArgumentNullException"); }
        }
    }

    static Status OpenBytes(byte[] bytes, ref Error err)
    {
        GCHandle pin = GCHandle.Alloc(bytes, GCHandleType.Pinned);
        IntPtr blob;
        Status s = Native.oc_blob_open_memory(pin.AddrOfPinnedObject(), (UIntPtr)bytes.Length, IntPtr.Zero, out blob, ref err);
        Native.oc_blob_close(blob);
        pin.Free();
        return s;
    }

    static Status OpenNamed(IntPtr bundle, string name, byte[] bytes, ref Error err)
    {
        GCHandle pin = GCHandle.Alloc(bytes, GCHandleType.Pinned);
        IntPtr blob;
        Status s = Native.oc_bundle_open_blob_memory(bundle, name, pin.AddrOfPinnedObject(), (UIntPtr)bytes.Length, out blob, ref err);
        Native.oc_blob_close(blob);
        pin.Free();
        return s;
    }
}
