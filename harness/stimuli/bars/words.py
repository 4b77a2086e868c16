"""Words for chart titles and axis titles.

GRAPE draws each title from the ``random-words`` package (one random English word). Their
content carries no information about the task, so any fixed list of ordinary English words
serves; this one (lower case, 3-11 letters) is ours, kept in the code so stimuli need no extra
dependency. Changing it changes every rendered chart: bump ``RENDER_VERSION`` in layout.py.
"""

WORDS: tuple[str, ...] = tuple("""
able account acid action advice agent air alloys amount angles animal answer apple area army
art attack autumn baby back balance ball band bank base basket battle beach bear beauty bed
bell bird birth blade blood board boat body bone book border bottle box brain branch bread
brick bridge brother brush bucket building burn butter button cable cake camera camp canal
card care carpet cart castle cattle cause chain chair chalk chance change cheese chicken
church circle city claim class clock cloud coal coat coffee coin colour comfort copper corn
cotton country cover crack cream crime crowd crown current curtain cushion damage dance
danger daughter debt decision degree design desk detail dinner direction dirt discovery
distance doctor door drain drawer dream dress drink driver drop dust earth edge effect engine
error event example existence expert face fact family farm father feather fence field figure
finger fire fish flag flame flight floor flower fold food force forest fork frame friend
fruit garden glass glove goat gold grain grass group growth guide hair hammer harbor harmony
hat heart heat hill history hole honey hook horse hospital hour house humor idea image ink
insect iron island jelly jewel journey judge kettle key kitchen knee knife knot ladder lake
lamp language lead leader leaf leather letter level library light limit line linen liquid
list lock magazines manager map market mask meal measure meat metal milk mind mine minute
mist money monkey month moon morning mother motion mountain music nail name nation needle
nerve net news night noise north note number ocean office oil orange order oven owner page
pain paint paper parcel party paste peace pencil person picture pipe place plane plant plate
pocket point poison porter potato powder power price print prison profit property purpose
quality question rail rain range rate reading reason record register relation report rest
rhythm rice river road robin rock roof room root rule sail salt sand scale school science
screw sea season seat secretary seed shade shadow shape sheep shelf ship shirt shock shoe
side sign silk silver sister size skin skirt sky sleep slope smoke snake snow soap society
sock song sort sorts sound soup south space spade sponge spoon spring square stage stamp star
station steam steel stem step stick stitch stone store story street string structure sugar
summer sun support surprise swim system table tail talk taste tax teeth theory thread throat
thumb ticket time tin toe tongue tooth town trade trail train tray tree trick trouble tuesday
turn twist umbrella unit use validation value verse vessel view voice walk wall war wash
watch water wave wax way weather week weight wheel whip whirl whistle wind window wine wing
winter wire woman wood wool word work worm wound writer year yesterday zebra
""".split())
