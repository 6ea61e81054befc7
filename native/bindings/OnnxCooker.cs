// OnnxCooker.cs - P/Invoke declarations of the whole C ABI of libonnx_cooker (native/include/onnx_cooker.h),
// for Unity and other .NET/Mono hosts. One to one with the header: read it for what each call does and
// for lifetimes. Memory handed to the library (blob bytes) is BORROWED: pin it (GCHandle.Alloc(bytes,
// GCHandleType.Pinned)) for as long as the blob and every session made from it live; release sessions
// (oc_session_release), then blobs, then free the handle. Options structs: pass IntPtr.Zero for the
// defaults, or a zero-initialized struct with the fields you need set. Threads (Unity's jobs, Tasks)
// may share one bundle, blob and runtime, opening blobs and creating sessions at once; a callback
// passed in (progress, reader) is then called from those threads, and its delegate must stay alive
// (hold a reference) for as long as the library may call it.
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;

namespace OnnxCooker
{
    public enum Status
    {
        Ok = 0,
        InvalidArgument = 1,
        OutOfMemory = 2,
        Io = 3,
        NotABlob = 4,
        Truncated = 5,
        Corrupt = 6,
        Checksum = 7,
        UnsupportedVersion = 8,
        TooLarge = 9,
        Manifest = 10,
        UnknownModel = 11,
        Signature = 12,
        IncompatibleRuntime = 13,
        RuntimeLoad = 14,
        SessionCreate = 15,
    }

    public enum ModelFormat { Onnx = 0, Ort = 1 }

    public enum LoadPath { OnnxInline = 0, OnnxFileBuffers = 1, OnnxExternal = 2, OrtInPlace = 3, OnnxMapped = 4, OnnxShared = 5, OrtBytes = 6 }

    [StructLayout(LayoutKind.Sequential)]
    public struct Error
    {
        public Status Status;
        [MarshalAs(UnmanagedType.ByValArray, SizeConst = 1024)] public byte[] MessageBytes;

        public static Error Create() { return new Error { MessageBytes = new byte[1024] }; }

        public string Message
        {
            get
            {
                if (MessageBytes == null) return "";
                int n = Array.IndexOf(MessageBytes, (byte)0);
                return System.Text.Encoding.UTF8.GetString(MessageBytes, 0, n < 0 ? MessageBytes.Length : n);
            }
        }
    }

    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    public delegate IntPtr AllocFn(IntPtr user, UIntPtr size, UIntPtr alignment);
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    public delegate void FreeFn(IntPtr user, IntPtr ptr);
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    public delegate void ProgressFn(IntPtr user, [MarshalAs(UnmanagedType.LPStr)] string stage, double fraction);
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    public delegate long ReaderSizeFn(IntPtr user, [MarshalAs(UnmanagedType.LPStr)] string path);
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    public delegate long ReaderReadFn(IntPtr user, [MarshalAs(UnmanagedType.LPStr)] string path, ulong offset,
                                      IntPtr buffer, UIntPtr count);
    // oc_ep_append_fn: put the EP named by `ep` (UTF-8: Native.Text) on the OrtSessionOptions* `options`
    // with `count` provider options (`keys`, `values`: arrays of UTF-8 pointers, Native.TextAt); on a
    // failure return its status and write why with Native.SetErrorMessage(err, ...).
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    public delegate Status EpAppendFn(IntPtr user, IntPtr options, IntPtr ep, IntPtr keys, IntPtr values,
                                      UIntPtr count, IntPtr err);

    [StructLayout(LayoutKind.Sequential)]
    public struct Allocator { public IntPtr Alloc, Free, User; }  // Marshal.GetFunctionPointerForDelegate

    [StructLayout(LayoutKind.Sequential)]
    public struct BlobOptions
    {
        public ulong MaxModelSize;
        public int SkipRawCheck, Threads;
        public IntPtr Allocator, Progress, ProgressUser;
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct BundleOptions
    {
        public ulong MaxModelSize;
        public int SkipVerify, ReadBlobs;
        public IntPtr PublicKeys;       // 32 bytes per key, back to back (pinned)
        public UIntPtr PublicKeyCount;
        public IntPtr Signature;        // oc_bundle_open_manifest: manifest.json.sig bytes (pinned)
        public UIntPtr SignatureSize;
        public IntPtr Allocator, Progress, ProgressUser;
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct SessionOptions
    {
        public IntPtr Providers;        // const char *const *: an array of UTF-8 strings (pinned)
        public UIntPtr ProviderCount;
        public int LowMemory, IntraOpThreads;
        public IntPtr Base, Progress, ProgressUser;
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct Reader { public IntPtr Size, Read, User; }

    [StructLayout(LayoutKind.Sequential)]
    public struct BlobInfo
    {
        public IntPtr Name, Platform;
        public ModelFormat Format;
        public IntPtr MinRuntimeVersion, CookKey, ModelSha256;
        public ulong ModelSize, GraphSize, WeightsSize;
        public IntPtr WeightsFile;
        public int SavedRuntimeOptimizations;
        public uint BlobFormatVersion;
    }

    [StructLayout(LayoutKind.Sequential)]
    public struct TensorInfo { public IntPtr Name, Type, Shape; }

    public enum DeviceType { Any = 0, Cpu = 1, Gpu = 2, Npu = 3 }

    [StructLayout(LayoutKind.Sequential)]
    public struct EpDevice { public IntPtr EpName; public DeviceType Type; public uint VendorId; public IntPtr Vendor; }

    [StructLayout(LayoutKind.Sequential)]
    public struct DevicePair { public IntPtr Ep; public DeviceType Type; }  // Ep: a UTF-8 string (pinned)

    [StructLayout(LayoutKind.Sequential)]
    public struct Devices
    {
        public IntPtr Policy;           // a UTF-8 policy name, or IntPtr.Zero with pairs
        public IntPtr Pairs;            // DevicePair[] (pinned), or IntPtr.Zero with a policy
        public UIntPtr PairCount;
    }

    public static class Native
    {
#if UNITY_IOS && !UNITY_EDITOR
        const string Lib = "__Internal";  // iOS links the library statically into the player
#else
        const string Lib = "onnx_cooker";  // libonnx_cooker.so / .dylib, onnx_cooker.dll
#endif

        [DllImport(Lib)] public static extern IntPtr oc_status_name(Status status);

        // Blobs
        [DllImport(Lib)] public static extern Status oc_blob_open_memory(IntPtr data, UIntPtr size, IntPtr options, out IntPtr blob, ref Error err);
        [DllImport(Lib)] public static extern Status oc_blob_open_file([MarshalAs(UnmanagedType.LPStr)] string path, IntPtr options, out IntPtr blob, ref Error err);
        [DllImport(Lib)] public static extern void oc_blob_close(IntPtr blob);
        [DllImport(Lib)] public static extern Status oc_blob_get_info(IntPtr blob, out BlobInfo info, ref Error err);
        [DllImport(Lib)] public static extern Status oc_blob_model(IntPtr blob, out IntPtr bytes, out UIntPtr size, ref Error err);
        [DllImport(Lib)] public static extern Status oc_blob_weights(IntPtr blob, out IntPtr bytes, out UIntPtr size, ref Error err);
        [DllImport(Lib)] public static extern UIntPtr oc_blob_ep_count(IntPtr blob);
        [DllImport(Lib)] public static extern IntPtr oc_blob_ep_name(IntPtr blob, UIntPtr index);
        [DllImport(Lib)] public static extern UIntPtr oc_blob_provider_option_count(IntPtr blob, [MarshalAs(UnmanagedType.LPStr)] string ep);
        [DllImport(Lib)] public static extern Status oc_blob_provider_option(IntPtr blob, [MarshalAs(UnmanagedType.LPStr)] string ep, UIntPtr index, out IntPtr key, out IntPtr value);
        [DllImport(Lib)] public static extern UIntPtr oc_blob_session_option_count(IntPtr blob, [MarshalAs(UnmanagedType.LPStr)] string ep);
        [DllImport(Lib)] public static extern Status oc_blob_session_option(IntPtr blob, [MarshalAs(UnmanagedType.LPStr)] string ep, UIntPtr index, out IntPtr key, out IntPtr value);
        [DllImport(Lib)] public static extern Status oc_blob_check_recipe(IntPtr blob, ref Error err);

        // Bundles
        [DllImport(Lib)] public static extern Status oc_bundle_open_dir([MarshalAs(UnmanagedType.LPStr)] string dir, IntPtr options, out IntPtr bundle, ref Error err);
        [DllImport(Lib)] public static extern Status oc_bundle_open_reader(ref Reader reader, IntPtr options, out IntPtr bundle, ref Error err);
        [DllImport(Lib)] public static extern Status oc_bundle_open_manifest(IntPtr manifest, UIntPtr size, IntPtr blobReader, IntPtr options, out IntPtr bundle, ref Error err);
        [DllImport(Lib)] public static extern void oc_bundle_close(IntPtr bundle);
        [DllImport(Lib)] public static extern IntPtr oc_bundle_platform(IntPtr bundle);
        [DllImport(Lib)] public static extern UIntPtr oc_bundle_model_count(IntPtr bundle);
        [DllImport(Lib)] public static extern IntPtr oc_bundle_model_name(IntPtr bundle, UIntPtr index);
        // The blob file the manifest names for a model (relative to the bundle folder; IntPtr.Zero: no such model) and its size
        [DllImport(Lib)] public static extern IntPtr oc_bundle_model_file(IntPtr bundle, [MarshalAs(UnmanagedType.LPStr)] string name, out ulong size);
        [DllImport(Lib)] public static extern Status oc_bundle_signature(IntPtr bundle, [MarshalAs(UnmanagedType.LPStr)] string name, int outputs, UIntPtr index, out TensorInfo info, ref Error err);
        [DllImport(Lib)] public static extern UIntPtr oc_bundle_signature_count(IntPtr bundle, [MarshalAs(UnmanagedType.LPStr)] string name, int outputs);
        // The shape without JSON: rank (-1: none), and each dimension's size (-1: free) and name (IntPtr.Zero: none)
        [DllImport(Lib)] public static extern long oc_bundle_signature_rank(IntPtr bundle, [MarshalAs(UnmanagedType.LPStr)] string name, int outputs, UIntPtr index);
        [DllImport(Lib)] public static extern Status oc_bundle_signature_dim(IntPtr bundle, [MarshalAs(UnmanagedType.LPStr)] string name, int outputs, UIntPtr index, UIntPtr dim, out long size, out IntPtr symbol, ref Error err);
        [DllImport(Lib)] public static extern Status oc_bundle_open_blob(IntPtr bundle, [MarshalAs(UnmanagedType.LPStr)] string name, out IntPtr blob, ref Error err);
        [DllImport(Lib)] public static extern Status oc_bundle_open_blob_memory(IntPtr bundle, [MarshalAs(UnmanagedType.LPStr)] string name, IntPtr data, UIntPtr size, out IntPtr blob, ref Error err);

        // Sessions
        [DllImport(Lib)] public static extern Status oc_runtime_load([MarshalAs(UnmanagedType.LPStr)] string libraryPath, out IntPtr runtime, ref Error err);
        [DllImport(Lib)] public static extern Status oc_runtime_from_api(IntPtr api, [MarshalAs(UnmanagedType.LPStr)] string version, out IntPtr runtime, ref Error err);
        [DllImport(Lib)] public static extern Status oc_runtime_from_api_base(IntPtr apiBase, out IntPtr runtime, ref Error err);
        [DllImport(Lib)] public static extern void oc_runtime_release(IntPtr runtime);
        [DllImport(Lib)] public static extern IntPtr oc_runtime_api(IntPtr runtime);
        [DllImport(Lib)] public static extern IntPtr oc_runtime_version(IntPtr runtime);
        [DllImport(Lib)] public static extern Status oc_session_create(IntPtr runtime, IntPtr blob, IntPtr options, out IntPtr session, out LoadPath pathUsed, ref Error err);
        [DllImport(Lib)] public static extern void oc_session_release(IntPtr runtime, IntPtr session);
        [DllImport(Lib)] public static extern IntPtr oc_load_path_name(LoadPath path);

        // Plugin EPs (onnxruntime 1.22+)
        [DllImport(Lib)] public static extern int oc_runtime_has_plugin_eps(IntPtr runtime);
        [DllImport(Lib)] public static extern Status oc_runtime_register_ep_library(IntPtr runtime, [MarshalAs(UnmanagedType.LPStr)] string name, [MarshalAs(UnmanagedType.LPStr)] string path, ref Error err);
        [DllImport(Lib)] public static extern UIntPtr oc_runtime_ep_device_count(IntPtr runtime);
        [DllImport(Lib)] public static extern Status oc_runtime_ep_device(IntPtr runtime, UIntPtr index, out EpDevice device, ref Error err);
        [DllImport(Lib)] public static extern Status oc_session_create_on_devices(IntPtr runtime, IntPtr blob, IntPtr options, ref Devices devices, out IntPtr session, out LoadPath pathUsed, [Out] byte[] explanation, UIntPtr explanationSize, ref Error err);
        // devices IntPtr.Zero: the blob decides (as oc_session_create), with the explanation
        [DllImport(Lib)] public static extern Status oc_session_create_on_devices(IntPtr runtime, IntPtr blob, IntPtr options, IntPtr devices, out IntPtr session, out LoadPath pathUsed, [Out] byte[] explanation, UIntPtr explanationSize, ref Error err);
        // refused: OC_REFUSED_MAX (256) bytes hold the faster load path onnxruntime refused for the model, and why ("": none)
        [DllImport(Lib)] public static extern Status oc_session_create_reported(IntPtr runtime, IntPtr blob, IntPtr options, IntPtr devices, out IntPtr session, out LoadPath pathUsed, [Out] byte[] explanation, UIntPtr explanationSize, [Out] byte[] refused, UIntPtr refusedSize, ref Error err);
        [DllImport(Lib)] public static extern IntPtr oc_blob_device_policy(IntPtr blob);

        // The engine's own EPs (a console's): append null removes the EP's appender; hold the delegate
        // (and what `user` points at) for as long as it is registered
        [DllImport(Lib)] public static extern Status oc_runtime_set_ep_appender(IntPtr runtime, [MarshalAs(UnmanagedType.LPStr)] string ep, EpAppendFn append, IntPtr user, ref Error err);

        /// <summary>Element `index` of a C array of UTF-8 pointers (an EpAppendFn's keys or values).</summary>
        public static string TextAt(IntPtr array, int index) { return Text(Marshal.ReadIntPtr(array, index * IntPtr.Size)); }

        /// <summary>Write `message` (UTF-8, cut to fit) into the oc_error* an EpAppendFn was given.</summary>
        public static void SetErrorMessage(IntPtr err, string message)
        {
            byte[] bytes = System.Text.Encoding.UTF8.GetBytes(message);
            int n = Math.Min(bytes.Length, 1023);  // OC_MESSAGE_SIZE - 1
            Marshal.Copy(bytes, 0, err + 4, n);    // after oc_error's status
            Marshal.WriteByte(err, 4 + n, 0);
        }

        /// <summary>OC_REFUSED_MAX: room for any `refused` report of oc_session_create_reported.</summary>
        public const int RefusedMax = 256;

        /// <summary>The NUL-terminated UTF-8 text in a buffer the library filled.</summary>
        public static string TextOf(byte[] buffer)
        {
            int n = Array.IndexOf(buffer, (byte)0);
            return System.Text.Encoding.UTF8.GetString(buffer, 0, n < 0 ? buffer.Length : n);
        }

        /// <summary>A UTF-8 string the library returned (NULL: null).</summary>
        public static string Text(IntPtr utf8)
        {
            if (utf8 == IntPtr.Zero) return null;
            int n = 0;
            while (Marshal.ReadByte(utf8, n) != 0) n++;
            byte[] bytes = new byte[n];
            Marshal.Copy(utf8, bytes, 0, n);
            return System.Text.Encoding.UTF8.GetString(bytes);
        }
    }

    // ---------------------------------------------------------------------------------------------
    // The same, managed: IDisposable owners over the handles above, failures as OnnxCookerException.
    // A Blob or Runtime disposed while sessions made from it live is closed when the last of them is
    // disposed (a Blob opened from a byte[] keeps it pinned until then). Objects keep what they borrow referenced, so the garbage
    // collector never frees it first; they have no finalizers: Dispose (or `using`) releases.
    // ---------------------------------------------------------------------------------------------

    public sealed class OnnxCookerException : Exception
    {
        public Status Status { get; }
        public OnnxCookerException(Status status, string message) : base(message) { Status = status; }

        internal static void Check(Status status, Error err)
        {
            if (status != Status.Ok)
                throw new OnnxCookerException(status, Native.Text(Native.oc_status_name(status)) + ": " + err.Message);
        }
    }

    public sealed class Bundle : IDisposable
    {
        public IntPtr Handle { get; private set; }
        Bundle(IntPtr handle) { Handle = handle; }

        /// <summary>The bundle in a folder (its manifest.json); options: an unmanaged BundleOptions, or IntPtr.Zero.</summary>
        public static Bundle Open(string dir, IntPtr options = default(IntPtr))
        {
            Error err = Error.Create();
            IntPtr handle;
            OnnxCookerException.Check(Native.oc_bundle_open_dir(dir, options, out handle, ref err), err);
            return new Bundle(handle);
        }

        /// <summary>manifest.json's bytes (copied): blobs then come from OpenBlob(name, bytes).</summary>
        public static Bundle FromManifest(byte[] manifest, IntPtr options = default(IntPtr))
        {
            Error err = Error.Create();
            IntPtr handle;
            GCHandle pin = GCHandle.Alloc(manifest, GCHandleType.Pinned);
            try
            {
                OnnxCookerException.Check(Native.oc_bundle_open_manifest(pin.AddrOfPinnedObject(), (UIntPtr)manifest.Length,
                                                                         IntPtr.Zero, options, out handle, ref err), err);
            }
            finally { pin.Free(); }
            return new Bundle(handle);
        }

        public string Platform { get { return Native.Text(Native.oc_bundle_platform(Live())); } }

        public string[] Models
        {
            get
            {
                string[] names = new string[(int)Native.oc_bundle_model_count(Live())];
                for (int i = 0; i < names.Length; i++) names[i] = Native.Text(Native.oc_bundle_model_name(Handle, (UIntPtr)i));
                return names;
            }
        }

        /// <summary>The blob file the manifest names for a model (relative to the bundle folder), null for none.</summary>
        public string ModelFile(string name, out ulong size) { return Native.Text(Native.oc_bundle_model_file(Live(), name, out size)); }

        public TensorInfo[] Signature(string name, bool outputs)
        {
            ulong size;
            if (Native.oc_bundle_model_file(Live(), name, out size) == IntPtr.Zero) Signature(name, outputs, 0); // throws UnknownModel
            TensorInfo[] found = new TensorInfo[(int)Native.oc_bundle_signature_count(Live(), name, outputs ? 1 : 0)];
            for (int i = 0; i < found.Length; i++)
            {
                Error err = Error.Create();
                OnnxCookerException.Check(Native.oc_bundle_signature(Handle, name, outputs ? 1 : 0, (UIntPtr)i, out found[i], ref err), err);
            }
            return found;
        }

        /// <summary>One input's (outputs: output's) name, type and shape as JSON; throws for an unknown model or index.</summary>
        public TensorInfo Signature(string name, bool outputs, int index)
        {
            Error err = Error.Create();
            TensorInfo info;
            OnnxCookerException.Check(Native.oc_bundle_signature(Live(), name, outputs ? 1 : 0, (UIntPtr)index, out info, ref err), err);
            return info;
        }

        /// <summary>One signature's dimensions: (size, name) each, size -1 where it is free and name null where
        /// it has none; empty for no shape (a non-tensor).</summary>
        public KeyValuePair<long, string>[] Dims(string name, bool outputs, int index)
        {
            Signature(name, outputs, index); // an unknown model or index throws (the rank alone reads as "no shape")
            long rank = Native.oc_bundle_signature_rank(Live(), name, outputs ? 1 : 0, (UIntPtr)index);
            KeyValuePair<long, string>[] found = new KeyValuePair<long, string>[rank < 0 ? 0 : rank];
            for (int d = 0; d < found.Length; d++)
            {
                Error err = Error.Create();
                long size;
                IntPtr symbol;
                OnnxCookerException.Check(Native.oc_bundle_signature_dim(Handle, name, outputs ? 1 : 0, (UIntPtr)index, (UIntPtr)d,
                                                                         out size, out symbol, ref err), err);
                found[d] = new KeyValuePair<long, string>(size, Native.Text(symbol));
            }
            return found;
        }

        /// <summary>A model's blob read or mapped from the bundle folder.</summary>
        public Blob OpenBlob(string name)
        {
            Error err = Error.Create();
            IntPtr blob;
            OnnxCookerException.Check(Native.oc_bundle_open_blob(Live(), name, out blob, ref err), err);
            return new Blob(blob, default(GCHandle), null);
        }

        /// <summary>A model's blob from bytes the game holds (a pak's, a ScriptableObject's), checked against
        /// the manifest; the bytes stay pinned until the Blob is disposed.</summary>
        public Blob OpenBlob(string name, byte[] bytes)
        {
            if (bytes == null) throw new ArgumentNullException("bytes");
            Error err = Error.Create();
            IntPtr blob;
            GCHandle pin = GCHandle.Alloc(bytes, GCHandleType.Pinned);
            Status status = Native.oc_bundle_open_blob_memory(Live(), name, pin.AddrOfPinnedObject(), (UIntPtr)bytes.Length, out blob, ref err);
            if (status != Status.Ok) pin.Free();
            OnnxCookerException.Check(status, err);
            return new Blob(blob, pin, bytes);
        }

        IntPtr Live()
        {
            if (Handle == IntPtr.Zero) throw new ObjectDisposedException("OnnxCooker.Bundle");
            return Handle;
        }

        public void Dispose()
        {
            if (Handle != IntPtr.Zero) Native.oc_bundle_close(Handle);  // blobs opened from it stay valid
            Handle = IntPtr.Zero;
        }
    }

    /// <summary>Counts the sessions made from an owner (a Blob, a Runtime) so that its Dispose while
    /// they live waits for the last one: a `using` around a blob that made a longer-lived session is
    /// safe (the bytes stay pinned and the blob open until that session is disposed).</summary>
    public sealed class SessionCount
    {
        readonly object gate = new object();
        int live;
        bool disposed;
        readonly Action close;

        internal SessionCount(Action close) { this.close = close; }

        internal bool Disposed { get { lock (gate) return disposed; } }
        internal void Started() { lock (gate) live++; }

        internal void Ended()
        {
            bool now;
            lock (gate) now = --live == 0 && disposed;
            if (now) close();
        }

        internal void Dispose()
        {
            bool now;
            lock (gate)
            {
                if (disposed) return;
                disposed = true;
                now = live == 0;
            }
            if (now) close();
        }
    }

    public sealed class Blob : IDisposable
    {
        public IntPtr Handle { get; private set; }
        GCHandle pin;
        readonly byte[] bytes;  // referenced while pinned
        internal readonly SessionCount Sessions;

        internal Blob(IntPtr handle, GCHandle pin, byte[] bytes)
        {
            Handle = handle;
            this.pin = pin;
            this.bytes = bytes;
            Sessions = new SessionCount(Close);
        }

        /// <summary>A blob from bytes alone (no bundle): pinned until Dispose.</summary>
        public static Blob FromBytes(byte[] bytes, IntPtr options = default(IntPtr))
        {
            Error err = Error.Create();
            IntPtr blob;
            GCHandle pin = GCHandle.Alloc(bytes, GCHandleType.Pinned);
            Status status = Native.oc_blob_open_memory(pin.AddrOfPinnedObject(), (UIntPtr)bytes.Length, options, out blob, ref err);
            if (status != Status.Ok) pin.Free();
            OnnxCookerException.Check(status, err);
            return new Blob(blob, pin, bytes);
        }

        public BlobInfo Info
        {
            get
            {
                Error err = Error.Create();
                BlobInfo info;
                OnnxCookerException.Check(Native.oc_blob_get_info(Live(), out info, ref err), err);
                return info;
            }
        }

        /// <summary>The recipe's EPs in order of preference.</summary>
        public string[] ExecutionProviders
        {
            get
            {
                string[] names = new string[(int)Native.oc_blob_ep_count(Live())];
                for (int i = 0; i < names.Length; i++) names[i] = Native.Text(Native.oc_blob_ep_name(Handle, (UIntPtr)i));
                return names;
            }
        }

        public KeyValuePair<string, string>[] ProviderOptions(string ep)
        {
            return Pairs(ep, Native.oc_blob_provider_option_count(Live(), ep), Native.oc_blob_provider_option);
        }

        public KeyValuePair<string, string>[] SessionOptions(string ep)
        {
            return Pairs(ep, Native.oc_blob_session_option_count(Live(), ep), Native.oc_blob_session_option);
        }

        /// <summary>Throws unless the recipe asks only for what a blob may (oc_blob_check_recipe):
        /// call it before applying the recipe to sessions of your own.</summary>
        public void CheckRecipe()
        {
            Error err = Error.Create();
            OnnxCookerException.Check(Native.oc_blob_check_recipe(Live(), ref err), err);
        }

        delegate Status Pair(IntPtr blob, string ep, UIntPtr index, out IntPtr key, out IntPtr value);

        KeyValuePair<string, string>[] Pairs(string ep, UIntPtr count, Pair pair)
        {
            KeyValuePair<string, string>[] found = new KeyValuePair<string, string>[(int)count];
            for (int i = 0; i < found.Length; i++)
            {
                IntPtr key, value;
                Error err = Error.Create();
                OnnxCookerException.Check(pair(Handle, ep, (UIntPtr)i, out key, out value), err);
                found[i] = new KeyValuePair<string, string>(Native.Text(key), Native.Text(value));
            }
            return found;
        }

        /// <summary>The model file's bytes (a copy: for Microsoft.ML.OnnxRuntime's InferenceSession(byte[])).</summary>
        public byte[] ModelBytes() { return Copy(Native.oc_blob_model); }

        /// <summary>The weights section's bytes (a copy; empty when none), named Info.WeightsFile in the graph.</summary>
        public byte[] WeightsBytes() { return Copy(Native.oc_blob_weights); }

        delegate Status Section(IntPtr blob, out IntPtr bytes, out UIntPtr size, ref Error err);

        byte[] Copy(Section section)
        {
            Error err = Error.Create();
            IntPtr data;
            UIntPtr size;
            OnnxCookerException.Check(section(Live(), out data, out size, ref err), err);
            byte[] copy = new byte[(long)(ulong)size];
            if (copy.Length > 0) Marshal.Copy(data, copy, 0, copy.Length);
            return copy;
        }

        internal IntPtr Live()
        {
            if (Handle == IntPtr.Zero || Sessions.Disposed) throw new ObjectDisposedException("OnnxCooker.Blob");
            return Handle;
        }

        /// <summary>Closes the blob and unpins its bytes, or, while sessions made from it live, once the
        /// last of them is disposed (they read its bytes in place). No new use after it.</summary>
        public void Dispose() { Sessions.Dispose(); }

        void Close()
        {
            if (Handle != IntPtr.Zero) Native.oc_blob_close(Handle);  // then the bytes it borrowed
            Handle = IntPtr.Zero;
            if (pin.IsAllocated) pin.Free();
            GC.KeepAlive(bytes);
        }
    }

    public sealed class Runtime : IDisposable
    {
        public IntPtr Handle { get; private set; }
        internal readonly SessionCount Sessions;
        Runtime(IntPtr handle)
        {
            Handle = handle;
            Sessions = new SessionCount(Close);
        }

        /// <summary>onnxruntime's library at `path` (null: the platform's default name).</summary>
        public static Runtime Load(string path)
        {
            Error err = Error.Create();
            IntPtr handle;
            OnnxCookerException.Check(Native.oc_runtime_load(path, out handle, ref err), err);
            return new Runtime(handle);
        }

        /// <summary>The onnxruntime the game already loads (Unity's onnxruntime package): its OrtGetApiBase(),
        /// e.g. from [DllImport("onnxruntime")] static extern IntPtr OrtGetApiBase().</summary>
        public static Runtime FromApiBase(IntPtr apiBase)
        {
            Error err = Error.Create();
            IntPtr handle;
            OnnxCookerException.Check(Native.oc_runtime_from_api_base(apiBase, out handle, ref err), err);
            return new Runtime(handle);
        }

        public string Version { get { return Native.Text(Native.oc_runtime_version(Live())); } }

        /// <summary>A session with the blob's recipe (options: an unmanaged SessionOptions, or IntPtr.Zero).</summary>
        public Session CreateSession(Blob blob, IntPtr options = default(IntPtr))
        {
            if (blob == null) throw new ArgumentNullException("blob");
            Error err = Error.Create();
            IntPtr session;
            LoadPath path;
            byte[] explanation = new byte[1024], refused = new byte[Native.RefusedMax];
            OnnxCookerException.Check(Native.oc_session_create_reported(Live(), blob.Live(), options, IntPtr.Zero, out session, out path,
                                                                        explanation, (UIntPtr)explanation.Length, refused,
                                                                        (UIntPtr)refused.Length, ref err), err);
            return new Session(this, blob, session, path, Native.TextOf(explanation), Native.TextOf(refused));
        }

        /// <summary>A session with the blob's recipe, these EPs in order instead of the blob's (none: the blob's),
        /// low_memory (no prepacked weight copies) and an intra-op thread count (0: onnxruntime's default),
        /// without building the unmanaged SessionOptions by hand.</summary>
        public Session CreateSession(Blob blob, string[] providers, bool lowMemory = false, int intraOpThreads = 0)
        {
            providers = providers ?? new string[0];
            IntPtr[] names = new IntPtr[providers.Length];
            IntPtr list = IntPtr.Zero, options = IntPtr.Zero;
            try
            {
                for (int i = 0; i < providers.Length; i++)
                {
                    if (providers[i] == null) throw new ArgumentNullException("providers", "a provider name is null");
                    byte[] utf8 = System.Text.Encoding.UTF8.GetBytes(providers[i] + "\0");
                    names[i] = Marshal.AllocHGlobal(utf8.Length);
                    Marshal.Copy(utf8, 0, names[i], utf8.Length);
                }
                SessionOptions o = new SessionOptions();
                if (providers.Length > 0)
                {
                    list = Marshal.AllocHGlobal(IntPtr.Size * providers.Length);
                    Marshal.Copy(names, 0, list, names.Length);
                    o.Providers = list;
                    o.ProviderCount = (UIntPtr)providers.Length;
                }
                o.LowMemory = lowMemory ? 1 : 0;
                o.IntraOpThreads = intraOpThreads;
                options = Marshal.AllocHGlobal(Marshal.SizeOf(typeof(SessionOptions)));
                Marshal.StructureToPtr(o, options, false);
                return CreateSession(blob, options);
            }
            finally
            {
                if (options != IntPtr.Zero) Marshal.FreeHGlobal(options);
                if (list != IntPtr.Zero) Marshal.FreeHGlobal(list);
                foreach (IntPtr name in names) if (name != IntPtr.Zero) Marshal.FreeHGlobal(name);
            }
        }

        internal IntPtr Live()
        {
            if (Handle == IntPtr.Zero || Sessions.Disposed) throw new ObjectDisposedException("OnnxCooker.Runtime");
            return Handle;
        }

        /// <summary>Releases the runtime, or, while sessions made through it live, once the last of them is
        /// disposed (they are released through it). No new session after it.</summary>
        public void Dispose() { Sessions.Dispose(); }

        void Close()
        {
            if (Handle != IntPtr.Zero) Native.oc_runtime_release(Handle);
            Handle = IntPtr.Zero;
        }
    }

    /// <summary>onnxruntime's OrtSession* (Handle), to run through the OrtApi (Native.oc_runtime_api).</summary>
    public sealed class Session : IDisposable
    {
        public IntPtr Handle { get; private set; }
        public LoadPath LoadPath { get; }
        /// <summary>Which EPs it got, and why (the line the Python loader logs).</summary>
        public string Explanation { get; }
        /// <summary>The faster load path onnxruntime refused for this model, and why ("" if none): why it copied.</summary>
        public string Refused { get; }
        readonly Runtime runtime;
        readonly Blob blob;  // the session borrows it: it stays open until this session is disposed

        internal Session(Runtime runtime, Blob blob, IntPtr handle, LoadPath path, string explanation, string refused)
        {
            this.runtime = runtime;
            this.blob = blob;
            Handle = handle;
            LoadPath = path;
            Explanation = explanation;
            Refused = refused;
            runtime.Sessions.Started();
            blob.Sessions.Started();
        }

        /// <summary>Releases the session; then a Blob or Runtime disposed while it lived is closed.</summary>
        public void Dispose()
        {
            if (Handle == IntPtr.Zero) return;
            Native.oc_session_release(runtime.Handle, Handle);
            Handle = IntPtr.Zero;
            runtime.Sessions.Ended();
            blob.Sessions.Ended();
        }
    }
}
