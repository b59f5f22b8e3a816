#!/bin/busybox sh
# /init of the VM tier's initramfs: loads the 9p modules, mounts the guest root that the host
# exports over virtio-9p (mount tag "rootfs") and hands over to systemd. Any failure powers the
# guest off at once, so the host sees it in the serial log instead of waiting for its timeout.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

die() {
  echo "turnhost-vm-initramfs: $*" >/dev/console
  poweroff -f
}

echo "turnhost-vm-initramfs: loading modules" >/dev/console
for module in $(cat /modules/order); do
  insmod "/modules/$module" || die "insmod $module failed"
done

mkdir -p /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288,cache=mmap,rw rootfs /newroot \
  || die "mounting the 9p root failed"
[ -x /newroot/sbin/init ] || die "/sbin/init is missing on the 9p root"

echo "turnhost-vm-initramfs: switching to systemd" >/dev/console
mount --move /dev /newroot/dev
umount /proc /sys
exec switch_root /newroot /sbin/init
