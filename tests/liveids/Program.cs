// atliveids: activity ids as a live .NET runtime makes them, the oracle of
// tests/unit/test_actpath_live.c. An EventSource starts and stops nested, recursive and
// non-recursive activities (deep paths, thousands of siblings, the overflow cases, the depth cap) and
// an in-process EventListener records every Start and Stop as the runtime wrote it.
//
// Activity tracking is on only when TplEventSource's TasksFlowActivityIds keyword (0x80) is enabled
// at the first Start (ActivityTracker.OnStart checks it once): the listener enables it first.
//
// Output (TSV, in the order the events were written; GUIDs as 32 hex digits in memory order):
//   pid     <Environment.ProcessId>
//   start   <kind> <depth> <path> <activity id> <related activity id>
//   stop    <kind> <activity id>
//   ticks   <n>       n Tick children started and stopped, not written out (Siblings)
// kind is the event name without Start/Stop (Deep: EventActivityOptions.Recursive; Leaf and Tick:
// not; Tick only makes siblings);
// depth is the nesting as the program knows it (1 for a root); path is the runtime's own record of
// the activity's creation path, "/1" (the AppDomain) then each id, read from ActivityTracker's
// ActivityInfo (its private Path()), "-" when the runtime made no activity (past its depth limit).
//   atliveids [output.tsv]   (stdout without an argument)
using System.Diagnostics.Tracing;
using System.Reflection;
using System.Text;

[EventSource(Name = "AtLive")]
sealed class AtLiveSource : EventSource
{
    public static readonly AtLiveSource Log = new();
    public static class Tasks
    {
        public const EventTask Deep = (EventTask)1;
        public const EventTask Leaf = (EventTask)2;
        public const EventTask Tick = (EventTask)3;
    }
    [Event(1, Task = Tasks.Deep, Opcode = EventOpcode.Start, ActivityOptions = EventActivityOptions.Recursive)]
    public void DeepStart(int n) => WriteEvent(1, n);
    [Event(2, Task = Tasks.Deep, Opcode = EventOpcode.Stop)]
    public void DeepStop(int n) => WriteEvent(2, n);
    [Event(3, Task = Tasks.Leaf, Opcode = EventOpcode.Start)]
    public void LeafStart(int n) => WriteEvent(3, n);
    [Event(4, Task = Tasks.Leaf, Opcode = EventOpcode.Stop)]
    public void LeafStop(int n) => WriteEvent(4, n);
    [Event(5, Task = Tasks.Tick, Opcode = EventOpcode.Start)]
    public void TickStart(int n) => WriteEvent(5, n);
    [Event(6, Task = Tasks.Tick, Opcode = EventOpcode.Stop)]
    public void TickStop(int n) => WriteEvent(6, n);
}

sealed class Recorder : EventListener
{
    // OnEventSourceCreated runs from the base constructor, before this class's field initialisers
    public static readonly StringBuilder Out = new();
    public static int Depth; // the program's nesting, kept by the scenarios
    public static bool Quiet; // a sibling not written out (Program.Siblings)

    static readonly Type Tracker = typeof(EventSource).Assembly.GetType("System.Diagnostics.Tracing.ActivityTracker")!;
    static readonly Type Info = Tracker.GetNestedType("ActivityInfo", BindingFlags.NonPublic)!;
    static readonly MethodInfo PathOf = Info.GetMethod("Path", BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Static)!;
    static readonly FieldInfo Level = Info.GetField("m_level", BindingFlags.NonPublic | BindingFlags.Instance)!;
    static readonly FieldInfo Current = Tracker.GetField("m_current", BindingFlags.NonPublic | BindingFlags.Instance)!;
    static readonly object Instance = Tracker.GetProperty("Instance", BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Static)!.GetValue(null)!;

    protected override void OnEventSourceCreated(EventSource s)
    {
        if (s.Name == "System.Threading.Tasks.TplEventSource")
            EnableEvents(s, EventLevel.Informational, (EventKeywords)0x80);
        else if (s.Name == "AtLive")
            EnableEvents(s, EventLevel.Verbose, EventKeywords.All);
    }

    static string Hex(Guid g) => Convert.ToHexString(g.ToByteArray()).ToLowerInvariant();

    // the runtime's current ActivityInfo: the activity the Start just made, or the one that stays
    // current when it made none
    static object? CurrentInfo()
    {
        object? local = Current.GetValue(Instance);
        return local?.GetType().GetProperty("Value")!.GetValue(local);
    }

    protected override void OnEventWritten(EventWrittenEventArgs e)
    {
        if (e.EventSource.Name != "AtLive" || e.EventName == null || Quiet) return;
        if (e.Opcode == EventOpcode.Start) {
            string kind = e.EventName[..^"Start".Length];
            object? info = CurrentInfo();
            string path = "-";
            // a Start past the depth limit leaves the current activity as it was (one level up)
            if (info != null && (int)Level.GetValue(info)! == Depth - 1)
                path = "/1" + (string)PathOf.Invoke(null, new[] { info })!;
            Out.Append($"start\t{kind}\t{Depth}\t{path}\t{Hex(e.ActivityId)}\t{Hex(e.RelatedActivityId)}\n");
        } else if (e.Opcode == EventOpcode.Stop) {
            Out.Append($"stop\t{e.EventName[..^"Stop".Length]}\t{Hex(e.ActivityId)}\n");
        }
    }
}

static class Program
{
    static readonly AtLiveSource L = AtLiveSource.Log;
    static int s_n;

    // The nesting as the program knows it, with EventSource's rules: a Start of a non-recursive kind
    // live on the chain stops that one (and kills what it started) first; a Stop stops the nearest
    // live activity of its kind, killing those above it.
    static readonly List<string> s_chain = new();
    static void PopThrough(string kind)
    {
        int i = s_chain.LastIndexOf(kind);
        if (i >= 0) s_chain.RemoveRange(i, s_chain.Count - i);
    }
    static void Start(string kind)
    {
        if (kind != "Deep") PopThrough(kind);
        s_chain.Add(kind);
        Recorder.Depth = s_chain.Count;
        if (kind == "Deep") L.DeepStart(++s_n);
        else if (kind == "Leaf") L.LeafStart(++s_n);
        else L.TickStart(++s_n);
    }
    static void Stop(string kind)
    {
        if (kind == "Deep") L.DeepStop(s_n);
        else if (kind == "Leaf") L.LeafStop(s_n);
        else L.TickStop(s_n);
        PopThrough(kind);
    }
    static void Deep() => Start("Deep");
    static void DeepEnd() => Stop("Deep");
    static void Leaf() => Start("Leaf");
    static void LeafEnd() => Stop("Leaf");
    // count children under the current activity, each started and stopped: the next child's id is
    // count + 1 (how a program reaches ids above 4095). Only the children around each length code's
    // limits and the last are written out in full; a run of the others is one "ticks <n>" line.
    static bool Telling(int i, int count) =>
        i <= 12 || i == count || (i >= 250 && i <= 260) || (i >= 4090 && i <= 4100) || (i >= 65530 && i <= 65540);
    static void Siblings(int count)
    {
        int quiet = 0;
        for (int i = 1; i <= count; i++) {
            bool tell = Telling(i, count);
            if (tell && quiet > 0) { Recorder.Out.Append($"ticks\t{quiet}\n"); quiet = 0; }
            Recorder.Quiet = !tell;
            Start("Tick"); Stop("Tick");
            Recorder.Quiet = false;
            if (!tell) quiet++;
        }
    }

    static int Main(string[] args)
    {
        using var rec = new Recorder();
        Recorder.Out.Append($"pid\t{Environment.ProcessId}\n");

        // roots: the process-wide root counter past 10, 255 and 4095 (/1/1 .. /1/4200)
        for (int i = 0; i < 4200; i++) {
            Deep();
            if (i % 97 == 0) { Leaf(); LeafEnd(); }
            DeepEnd();
        }

        // siblings past every length code, under parents whose path ends on a whole byte (//1/5 is 0x15)
        // and in a half byte (//1/5/3): a child's length code lands in a high or a low nibble
        foreach (int count in new[] { 70000, 4200 }) {
            Deep();
            Siblings(count);
            Deep();
            Siblings(count == 70000 ? 300 : 4200);
            Deep(); Siblings(12); DeepEnd();
            DeepEnd();
            DeepEnd();
        }

        // nesting to the runtime's depth limit and past it, with ids of every size on the way, so the
        // path overflows the 12 bytes at different offsets and the ids go to the nearest ancestor with
        // room ('$' overflow ids)
        int[][] shapes = {
            new[] { 0 },
            new[] { 0, 10, 0, 0, 255, 0 },
            new[] { 300, 0, 4095, 1, 4096, 0, 11 },
            new[] { 9, 10, 11, 254, 255, 256 },
        };
        foreach (var shape in shapes) {
            int depth = 0;
            for (int level = 0; level < 104; level++, depth++) {
                Siblings(shape[level % shape.Length]);
                Deep();
            }
            Leaf(); LeafEnd();
            for (; depth > 0; depth--) DeepEnd();
        }

        // EventSource's rules on a random walk: a non-recursive Leaf started inside a Leaf stops the
        // outer one first; stopping a Deep while Leafs it started are live kills them (no Stop);
        // bursts of siblings; all of it deep enough to overflow
        for (int seed = 1; seed <= 3; seed++) {
            var rnd = new Random(seed);
            for (int op = 0; op < 4000; op++) {
                int r = rnd.Next(100);
                if (r < 35 && s_chain.Count < 60) Deep();
                else if (r < 45) Leaf();
                else if (r < 75 && s_chain.Count > 0) Stop(s_chain[^1]);
                else if (r < 85) Siblings(rnd.Next(1, 4) * (rnd.Next(4) == 0 ? 90 : 3));
                else if (r < 90) Siblings(rnd.Next(20) == 0 ? 4100 : 1);
                else if (s_chain.Contains("Deep")) DeepEnd(); // kills the Leafs above the nearest Deep
            }
            while (s_chain.Count > 0) Stop(s_chain[^1]);
        }

        if (args.Length > 0) File.WriteAllText(args[0], Recorder.Out.ToString());
        else Console.Out.Write(Recorder.Out.ToString());
        return 0;
    }
}
